"""Target parsing: every accepted form, and a clear message for each bad one."""

import pytest

from specdec_collector.core.targets import TargetPolicy, parse_target, parse_target_name


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
        # Numeric IPv4 forms are read as resolvers and proxies read them, so the policy sees them.
        ("2852039166:80", "169.254.169.254:80", "http://169.254.169.254:80/metrics"),
        ("http://0xa9fea9fe/latest", "169.254.169.254:80", "http://169.254.169.254:80/latest"),
        ("169.254.43518:80", "169.254.169.254:80", "http://169.254.169.254:80/metrics"),
        ("0251.0376.0251.0376:80", "169.254.169.254:80", "http://169.254.169.254:80/metrics"),
        ("127.1:8000", "127.0.0.1:8000", "http://127.0.0.1:8000/metrics"),
        ("cafe.bad:80", "cafe.bad:80", "http://cafe.bad:80/metrics"),  # a name, not a number
    ],
)  # fmt: skip
def test_accepted_forms(value: object, key: str, url: str) -> None:
    target = parse_target(value)  # type: ignore[arg-type]
    assert (target.name, target.url) == (key, url)


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
        ("http://h:80/metrics\x01", r"holds '\\x01' at position 19"),
        ("http://h:80/?a=\x7f", "only printable ASCII"),
        ("http://h:80/caf\u00e9", "percent-encode"),
        ("1.2.3.4.5:80", "neither an IPv4 address nor a host name"),
    ],
)
def test_rejected_forms(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_target(value)  # type: ignore[arg-type]


def test_key_of_a_path_parameter() -> None:
    assert parse_target_name("[0::1]:80") == "[::1]:80"
    assert parse_target_name("H.example:1") == "h.example:1"


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("169.254.169.254", "link-local (cloud metadata)"),
        ("fe80::1", "link-local (cloud metadata)"),
        ("::ffff:169.254.169.254", "link-local (cloud metadata)"),
        ("0.0.0.0", "in 0.0.0.0/8"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("::", "unspecified"),
        ("fd00:ec2::254", "AWS instance services"),
        ("fd00:ec2::23", "AWS instance services"),  # EKS Pod Identity: credentials
        ("fd20:ce::254", "GCP metadata server over IPv6"),
        ("100.100.100.200", "Alibaba Cloud metadata"),
        ("168.63.129.16", "Azure wire server"),
        # IPv4 inside IPv6: compatible, translated, NAT64 (both prefixes), 6to4, Teredo.
        ("::a9fe:a9fe", "169.254.169.254 (in ::a9fe:a9fe) is link-local"),
        ("::ffff:0:a9fe:a9fe", "169.254.169.254 (in ::ffff:0:a9fe:a9fe) is link-local"),
        ("64:ff9b::a9fe:a9fe", "169.254.169.254 (in 64:ff9b::a9fe:a9fe) is link-local"),
        ("64:ff9b:1::a9fe:a9fe", "169.254.169.254 (in 64:ff9b:1::a9fe:a9fe) is link-local"),
        ("64:ff9b::6464:64c8", "100.100.100.200 (in 64:ff9b::6464:64c8) is Alibaba"),
        ("2002:a9fe:a9fe::1", "169.254.169.254 (in 2002:a9fe:a9fe::1) is link-local"),
        ("2001:0:4136:e378:8000:63bf:5601:5601", "169.254.169.254 (in 2001:0:4136:e378:8000:63bf:5601:5601)"),
    ],
)  # fmt: skip
def test_always_denied_addresses(address: str, reason: str) -> None:
    refusal = TargetPolicy().refusal("h", address)
    assert refusal is not None and reason in refusal
    listed = ("169.254.0.0/16, fe80::/10, 0.0.0.0/8, 224.0.0.0/4, ff00::/8, ::/0, "
              "100.100.100.200/32, 168.63.129.16/32")  # fmt: skip
    assert TargetPolicy.parse(listed).refusal("h", address) is None


@pytest.mark.parametrize("name", ["metadata.google.internal", "metadata", "instance-data"])
def test_metadata_names_are_refused_unless_listed_by_name(name: str) -> None:
    refusal = TargetPolicy().refusal(name, "10.0.0.1")
    assert refusal == (
        f"{name} is a cloud metadata service; list it in SPECDEC_ALLOWED_TARGETS to allow it"
    )
    assert TargetPolicy().name_refusal(name) == refusal  # through a proxy too
    assert TargetPolicy().metadata_refusal(name) == refusal  # before resolving
    assert TargetPolicy.parse(f"{name}, 10.0.0.0/8").refusal(name, "10.0.0.1") is None


def test_unrestricted_policy_allows_the_rest() -> None:
    for address in ("10.0.0.1", "192.168.1.1", "127.0.0.1", "::1", "8.8.8.8", "::ffff:127.0.0.1",
                    "64:ff9b::808:808", "2002:808:808::1"):  # fmt: skip
        assert TargetPolicy().refusal("h", address) is None


def test_allow_list() -> None:
    policy = TargetPolicy.parse("10.0.0.0/8, vllm-0, *.svc.cluster.local")
    assert policy.refusal("x", "10.9.9.9") is None
    assert policy.refusal("vllm-0", "172.16.0.1") is None
    assert policy.refusal("a.svc.cluster.local", "172.16.0.2") is None
    assert (
        policy.refusal("svc.cluster.local", "172.16.0.3")
        == "svc.cluster.local (172.16.0.3) is not in SPECDEC_ALLOWED_TARGETS"
    )
    # A name rule does not open the always-denied ranges.
    assert policy.refusal("vllm-0", "169.254.169.254") is not None
    with pytest.raises(ValueError, match="'not a host!'"):
        TargetPolicy.parse("10.0.0.0/8, not a host!")


def test_target_objects_with_headers() -> None:
    target = parse_target(
        {"url": "http://h:9/m", "headers": {"Authorization": "Bearer x", "X-Team": "a"}}
    )
    assert (target.name, target.url, target.headers) == (
        "h:9",
        "http://h:9/m",
        (("Authorization", "Bearer x"), ("X-Team", "a")),
    )
    assert "Bearer" not in repr(target)
    model = parse_target({"host_ip": "10.0.0.1", "host_port": 80, "headers": {"A": "b"}})
    assert model.headers == (("A", "b"),)


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"Bad Name": "x"}, "not a valid HTTP header name"),
        ({"Host": "x"}, "set by the collector"),
        ({"A": "line\r\nInjected: yes"}, "visible ASCII"),
        ({"A": 5}, "string value"),
        ({f"H{i}": "v" for i in range(17)}, "at most 16"),
        ("Authorization: x", "an object"),
    ],
)
def test_bad_headers(headers: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        parse_target({"url": "http://h:1/", "headers": headers})
    assert "Injected" not in str(error.value)
