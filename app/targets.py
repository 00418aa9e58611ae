"""Target parsing and normalisation.

A target is `"host:port"`, `"http(s)://host[:port][/path]"`, or an AISBench model entry
`{"host_ip": ..., "host_port": ...}`. Every form becomes a `Target` with the URL to scrape
and the `host:port` key that names it within a window (IPv6 hosts bracketed).
"""

import functools
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

WINDOW_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"

_HOSTNAME = re.compile(
    r"^(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$"
)


@dataclass(frozen=True, slots=True)
class Target:
    """A `/metrics` endpoint to scrape, with the headers to send (never shown or logged)."""

    host: str
    port: int
    url: str
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

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


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")
_RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
MAX_HEADERS = 16


def _parse_headers(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise ValueError("headers must be an object of name: value strings")
    if len(value) > MAX_HEADERS:
        raise ValueError(f"at most {MAX_HEADERS} headers per target")
    headers = []
    for name, text in value.items():
        if not isinstance(name, str) or not _HEADER_NAME.match(name):
            raise ValueError(f"header name {str(name)[:64]!r} is not a valid HTTP header name")
        if name.lower() in _RESERVED_HEADERS:
            raise ValueError(f"header {name} is set by the collector")
        if not isinstance(text, str) or len(text) > 8192 or any(c in text for c in "\r\n\0"):
            # The value is a secret: the message names the header only.
            raise ValueError(f"header {name} needs a string value of one line, at most 8192 chars")
        headers.append((name, text))
    return tuple(headers)


def parse_target(value: str | Mapping[str, Any]) -> Target:
    """Parse one target in any accepted form; raise `ValueError` saying what is wrong.

    Objects are an AISBench model entry (`host_ip`, `host_port`) or `{"url": ...}`; either may
    carry `headers` to send with each scrape (for targets behind auth).
    """
    if isinstance(value, Mapping):
        headers = _parse_headers(value.get("headers"))
        if "url" in value:
            if not isinstance(value["url"], str):
                raise ValueError("url must be a string")
            return replace(parse_target(value["url"]), headers=headers)
        if "host_ip" not in value or "host_port" not in value:
            raise ValueError("an object target needs url, or host_ip and host_port")
        if not isinstance(value["host_ip"], str):
            raise ValueError("host_ip must be a string")
        return replace(
            _from_host_port(value["host_ip"].strip(), value["host_port"]), headers=headers
        )
    if not isinstance(value, str):
        raise ValueError("a target is a string or an object with host_ip and host_port")
    text = value.strip()
    if len(text) > 2048:
        raise ValueError("a target is at most 2048 characters")
    if "://" in text:
        return _from_url(text)
    if "/" in text:
        raise ValueError(f"{text!r} is not host:port; give a full http(s):// URL for a path")
    return _from_host_port(*_split_host_port(text))


def parse_target_key(text: str) -> str:
    """Normalise a `host:port` path parameter to the key `Target.key` gives."""
    return _from_host_port(*_split_host_port(text)).key


# --- where the collector may connect ------------------------------------------------------

_ALWAYS_DENIED = (
    (ipaddress.ip_network("169.254.0.0/16"), "link-local (cloud metadata)"),
    (ipaddress.ip_network("fe80::/10"), "link-local (cloud metadata)"),
    (ipaddress.ip_network("0.0.0.0/8"), "in 0.0.0.0/8"),
    (ipaddress.ip_network("224.0.0.0/4"), "multicast"),
    (ipaddress.ip_network("ff00::/8"), "multicast"),
)

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class TargetPolicy:
    """`SPECDEC_ALLOWED_TARGETS`: networks, exact host names and `*.suffix` patterns.

    Empty means anywhere except the always-denied ranges (link-local, 0.0.0.0/8, multicast);
    an always-denied address is allowed only by a listed network that contains it.
    """

    networks: tuple[IPNetwork, ...] = ()
    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()

    @property
    def restricted(self) -> bool:
        """Whether an allow-list is set."""
        return bool(self.networks or self.names or self.suffixes)

    @classmethod
    def parse(cls, text: str) -> "TargetPolicy":
        """Parse the comma-separated setting; `ValueError` names a bad entry."""
        networks: list[IPNetwork] = []
        names: set[str] = set()
        suffixes: list[str] = []
        for entry in (part.strip() for part in text.split(",")):
            if not entry:
                continue
            if entry.startswith("*."):
                suffixes.append("." + _check_host(entry[2:]))
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            try:
                names.add(_check_host(entry))
            except ValueError:
                raise ValueError(
                    f"SPECDEC_ALLOWED_TARGETS: {entry!r} is not a CIDR, host name or *.suffix"
                ) from None
        return cls(tuple(networks), frozenset(names), tuple(suffixes))

    def name_allowed(self, host: str) -> bool:
        """Whether `host` is listed by name or suffix."""
        return host in self.names or any(host.endswith(suffix) for suffix in self.suffixes)

    def refusal(self, host: str, address: str) -> str | None:
        """Why the collector may not connect to `address` (resolved from `host`), or None."""
        return _refusal(self, host, address)


# Pure and asked for every scrape of every target: parsing the address and testing it against
# each network was a tenth of a scrape's CPU. The policy is immutable, so it is part of the key.
@functools.lru_cache(maxsize=8192)
def _refusal(policy: TargetPolicy, host: str, address: str) -> str | None:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    listed = any(ip in network for network in policy.networks)
    for network, what in _ALWAYS_DENIED:
        if ip in network and not listed:
            return f"address {ip} is {what}; list it in SPECDEC_ALLOWED_TARGETS to allow it"
    if policy.restricted and not listed and not policy.name_allowed(host):
        return f"{host} ({ip}) is not in SPECDEC_ALLOWED_TARGETS"
    return None
