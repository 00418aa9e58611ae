"""Target parsing and normalisation.

A target is `"host:port"`, `"http(s)://host[:port][/path]"`, or an AISBench model entry
`{"host_ip": ..., "host_port": ...}`. Every form becomes a `Target` with the URL to scrape
and the `host:port` key that names it within a window (IPv6 hosts bracketed).
"""

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

WINDOW_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"

_HOSTNAME = re.compile(
    r"^(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$"
)


@dataclass(frozen=True, slots=True)
class Target:
    """A `/metrics` endpoint to scrape."""

    host: str
    port: int
    url: str

    @property
    def key(self) -> str:
        """`host:port`, with an IPv6 host in brackets: the target's name within a window."""
        return f"{_url_host(self.host)}:{self.port}"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _check_host(host: str) -> str:
    if not host:
        raise ValueError("host is empty")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not _HOSTNAME.match(host):
        raise ValueError(f"{host!r} is not a valid host name or IP address")
    return host.lower().rstrip(".")


def _check_port(port: Any) -> int:
    if isinstance(port, bool):
        raise ValueError(f"port {port!r} is not a number")
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if not isinstance(port, int):
        raise ValueError(f"port {port!r} is not a number")
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} is outside 1-65535")
    return port


def _from_host_port(host: str, port: Any) -> Target:
    host = _check_host(host)
    port = _check_port(port)
    return Target(host, port, f"http://{_url_host(host)}:{port}/metrics")


def _split_host_port(text: str) -> tuple[str, str]:
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"{text!r} is not host:port (IPv6 hosts are written [addr]:port)")
        if ":" not in host:
            raise ValueError(f"{text!r}: only IPv6 addresses go in brackets")
        return host, port
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r} is not host:port")
    if ":" in host:
        raise ValueError(f"{text!r}: write an IPv6 host in brackets, as [addr]:port")
    return host, port


def _from_url(text: str) -> Target:
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"scheme {parts.scheme!r} is not supported; use http or https")
    if parts.username is not None or parts.password is not None:
        raise ValueError("credentials in the URL are not supported")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{text!r} has an invalid port (1-65535)") from None
    host = _check_host(parts.hostname or "")
    if port is None:
        port = 443 if scheme == "https" else 80
    port = _check_port(port)
    path = parts.path or "/metrics"
    url = urlunsplit((scheme, f"{_url_host(host)}:{port}", path, parts.query, ""))
    return Target(host, port, url)


def parse_target(value: str | Mapping[str, Any]) -> Target:
    """Parse one target in any accepted form; raise `ValueError` saying what is wrong."""
    if isinstance(value, Mapping):
        if "host_ip" not in value or "host_port" not in value:
            raise ValueError("a model entry needs host_ip and host_port")
        if not isinstance(value["host_ip"], str):
            raise ValueError("host_ip must be a string")
        return _from_host_port(value["host_ip"].strip(), value["host_port"])
    if not isinstance(value, str):
        raise ValueError("a target is a string or an object with host_ip and host_port")
    text = value.strip()
    if "://" in text:
        return _from_url(text)
    if "/" in text:
        raise ValueError(f"{text!r} is not host:port; give a full http(s):// URL for a path")
    return _from_host_port(*_split_host_port(text))


def parse_target_key(text: str) -> str:
    """Normalise a `host:port` path parameter to the key `Target.key` gives."""
    return _from_host_port(*_split_host_port(text)).key
