"""Target parsing: every accepted form, and a clear message for each bad one."""

import pytest

from app.targets import parse_target, parse_target_key


@pytest.mark.parametrize(
    ("value", "key", "url"),
    [
        ("10.0.0.1:8080", "10.0.0.1:8080", "http://10.0.0.1:8080/metrics"),
        ("[::1]:8000", "[::1]:8000", "http://[::1]:8000/metrics"),
        ("[0:0::1]:8000", "[::1]:8000", "http://[::1]:8000/metrics"),
        ("Vllm-0.Example.com:80", "vllm-0.example.com:80", "http://vllm-0.example.com:80/metrics"),
        ("http://h:9/custom/metrics", "h:9", "http://h:9/custom/metrics"),
        ("https://h/metrics?x=1", "h:443", "https://h:443/metrics?x=1"),
        ("http://h", "h:80", "http://h:80/metrics"),
        ({"host_ip": "10.0.0.2", "host_port": 8080, "abbr": "vllm-api"}, "10.0.0.2:8080",
         "http://10.0.0.2:8080/metrics"),
        ({"host_ip": "10.0.0.2", "host_port": "8081"}, "10.0.0.2:8081", "http://10.0.0.2:8081/metrics"),
    ],
)  # fmt: skip
def test_accepted_forms(value: object, key: str, url: str) -> None:
    target = parse_target(value)  # type: ignore[arg-type]
    assert (target.key, target.url) == (key, url)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ftp://h:21/metrics", "scheme 'ftp' is not supported"),
        ("h:70000", "outside 1-65535"),
        ("h:0", "outside 1-65535"),
        ("http://h:70000/", "invalid port"),
        ("h", "is not host:port"),
        ("::1:80", "IPv6 host in brackets"),
        ("h/path:80", r"full http\(s\):// URL"),
        ("bad host:80", "not a valid host"),
        ("http://user:pw@h:80/", "credentials"),
        ({"host_ip": "h"}, "host_ip and host_port"),
        ({"host_ip": "h", "host_port": True}, "not a number"),
        (5, "a target is a string"),
    ],
)
def test_rejected_forms(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_target(value)  # type: ignore[arg-type]


def test_key_of_a_path_parameter() -> None:
    assert parse_target_key("[0::1]:80") == "[::1]:80"
    assert parse_target_key("H.example:1") == "h.example:1"
