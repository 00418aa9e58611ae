"""Target parsing and normalisation.

A target is `"host:port"`, `"http(s)://host[:port][/path]"`, or an AISBench model entry
`{"host_ip": ..., "host_port": ...}`. Every form becomes a `Target` with the URL to scrape
and the `host:port` that names it within a window (`Target.name`; IPv6 hosts bracketed).
"""

import ipaddress
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from specdec_collector.core.metadata import METADATA_NAMES, METADATA_NETWORKS

WINDOW_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"

_HOSTNAME = re.compile(
    r"^(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$"
)


#: Engines a target may be named as in a start body (those recognised from payloads, and
#: MindIE, whose metrics cannot give a window).
NAMED_ENGINES = (
    "vllm",
    "vllm-v0",
    "llamacpp",
    "trtllm",
    "sglang",
    "lmdeploy",
    "max",
    "fastdeploy",
    "tgi",
    "uniserve",
    "mindie",
)

#: How a server verifies drafts (vLLM's `rejection_sample_method`), as a start body may tell
#: it: the counters cannot.
VERIFICATIONS = ("standard", "block", "fly", "synthetic")


@dataclass(frozen=True, slots=True)
class EngineHints:
    """What a start body may tell of a target's engine that its metrics do not: its name, the
    draft tokens per step (SGLang's `--speculative-num-draft-tokens` - 1 when chained), and how
    it verifies drafts (`VERIFICATIONS`)."""

    engine: str | None = None
    draft_tokens_per_step: int | None = None
    verification: str | None = None


@dataclass(frozen=True, slots=True)
class Target:
    """A `/metrics` endpoint to scrape, with the headers to send (never shown or logged)."""

    host: str
    port: int
    url: str
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    hints: EngineHints = field(default_factory=EngineHints)
    # A Prometheus label selector, for a target of a window read from Prometheus that is named
    # by its labels rather than its `host:port` (then `host` is empty and `port` 0).
    selector: str | None = None

    @property
    def name(self) -> str:
        """`host:port`, with an IPv6 host in brackets, or the selector: its name in a window."""
        if self.selector is not None and not self.host:
            return self.selector
        return f"{_url_host(self.host)}:{self.port}"

    def in_prometheus(self) -> "Target":
        """This target as Prometheus knows it: its `instance` label, unless a selector."""
        if self.selector is not None:
            return self
        from specdec_collector.core.promql import instance_selector  # promql reads targets

        selector = instance_selector(self.name)
        return replace(self, url=PROMETHEUS_PREFIX + selector, selector=selector)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# Characters a numeric IPv4 host in any of its legacy forms is written with (`2852039166`,
# `0xa9fea9fe`, `169.254.43518`, `0251.0376.0251.0376`).
_NUMERIC_HOST = re.compile(r"^[0-9A-Fa-fXx.]+$")


def _check_host(host: str) -> str:
    if not host:
        raise ValueError("host is empty")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if _NUMERIC_HOST.match(host) and host.rstrip(".").rsplit(".", 1)[-1][:1].isdigit():
        # Resolvers, proxies and browsers read these as IPv4 addresses (inet_aton's rules): so
        # does the policy, or `http://2852039166/` would reach 169.254.169.254 unchecked.
        try:
            return socket.inet_ntoa(socket.inet_aton(host.rstrip(".")))
        except OSError:
            raise ValueError(f"{host!r} is neither an IPv4 address nor a host name") from None
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


# Printable ASCII without the space: what a URL may hold unencoded (RFC 3986).
_URL_TEXT = re.compile(r"^[\x21-\x7e]*$")


def _from_url(text: str) -> Target:
    if not _URL_TEXT.match(text):
        position = next(i for i, c in enumerate(text) if not "\x21" <= c <= "\x7e")
        raise ValueError(
            f"the URL holds {text[position]!r} at position {position}: "
            "only printable ASCII; percent-encode other characters"
        )
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
# RFC 9110 field-value, visible ASCII only (obs-text is not sent): no leading or trailing
# space or tab, no control characters. h11 refuses anything else, with the value in its error.
_HEADER_VALUE = re.compile(r"^(?:[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?$")
MAX_HEADER_VALUE_CHARS = 8192
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
        if (
            not isinstance(text, str)
            or len(text) > MAX_HEADER_VALUE_CHARS
            or not _HEADER_VALUE.match(text)
        ):
            # The value is a secret: the message names the header only.
            raise ValueError(
                f"header {name} needs a string value of visible ASCII characters (spaces and "
                f"tabs only between them), at most {MAX_HEADER_VALUE_CHARS} characters"
            )
        headers.append((name, text))
    return tuple(headers)


#: The stored `url` of a target read from Prometheus: this prefix, then its selector.
PROMETHEUS_PREFIX = "prometheus:"
MAX_SELECTOR_CHARS = 300


def _from_selector(value: Any) -> Target:
    if not isinstance(value, str) or not value.strip():
        raise ValueError('selector must be a label selector string, e.g. {job="vllm"}')
    text = value.strip()
    if len(text) > MAX_SELECTOR_CHARS or not _URL_TEXT.match(text.replace(" ", "")):
        raise ValueError(f"a selector is at most {MAX_SELECTOR_CHARS} printable characters")
    from specdec_collector.core.promql import check_target_selector  # Prometheus' grammar

    check_target_selector(text)
    return Target("", 0, PROMETHEUS_PREFIX + text, selector=text)


def _parse_hints(value: Mapping[str, Any]) -> EngineHints:
    engine, per_step = value.get("engine"), value.get("draft_tokens_per_step")
    if engine is not None and engine not in NAMED_ENGINES:
        raise ValueError(f"engine must be one of {', '.join(NAMED_ENGINES)}")
    if per_step is not None and (
        isinstance(per_step, bool) or not isinstance(per_step, int) or not 1 <= per_step <= 64
    ):
        raise ValueError("draft_tokens_per_step must be a whole number of 1-64")
    verification = value.get("verification")
    if verification is not None and verification not in VERIFICATIONS:
        raise ValueError(f"verification must be one of {', '.join(VERIFICATIONS)}")
    return EngineHints(engine, per_step, verification)


def parse_target(value: str | Mapping[str, Any]) -> Target:
    """Parse one target in any accepted form; raise `ValueError` saying what is wrong.

    Objects are an AISBench model entry (`host_ip`, `host_port`) or `{"url": ...}`; either may
    carry `headers` to send with each scrape (for targets behind auth), and `engine`,
    `draft_tokens_per_step` and `verification` (`EngineHints`).
    """
    if isinstance(value, Mapping):
        headers = _parse_headers(value.get("headers"))
        hints = _parse_hints(value)
        if "selector" in value:
            return replace(_from_selector(value["selector"]), headers=headers, hints=hints)
        if "url" in value:
            if not isinstance(value["url"], str):
                raise ValueError("url must be a string")
            return replace(parse_target(value["url"]), headers=headers, hints=hints)
        if "host_ip" not in value or "host_port" not in value:
            raise ValueError("an object target needs url, or host_ip and host_port")
        if not isinstance(value["host_ip"], str):
            raise ValueError("host_ip must be a string")
        return replace(
            _from_host_port(value["host_ip"].strip(), value["host_port"]),
            headers=headers,
            hints=hints,
        )
    if not isinstance(value, str):
        raise ValueError("a target is a string or an object with host_ip and host_port")
    return _parse_text(value)


def _parse_text(value: str) -> Target:
    if value.startswith(PROMETHEUS_PREFIX):  # as stored for a window read from Prometheus
        selector = value[len(PROMETHEUS_PREFIX) :]
        instance = re.fullmatch(r'\{instance="([^"]*)"\}', selector)
        if instance:
            return replace(parse_target(instance[1]), url=value, selector=selector)
        return _from_selector(selector)
    text = value.strip()
    if len(text) > 2048:
        raise ValueError("a target is at most 2048 characters")
    if "://" in text:
        return _from_url(text)
    if "/" in text:
        raise ValueError(f"{text!r} is not host:port; give a full http(s):// URL for a path")
    return _from_host_port(*_split_host_port(text))


def parse_target_name(text: str) -> str:
    """Normalise a `host:port` path parameter to the name `Target.name` gives."""
    return _from_host_port(*_split_host_port(text)).name


# --- where the collector may connect ------------------------------------------------------

_ALWAYS_DENIED = (
    *((network, what) for network, what, _ in METADATA_NETWORKS),
    (ipaddress.ip_network("0.0.0.0/8"), "in 0.0.0.0/8"),
    (ipaddress.ip_network("::/128"), "unspecified (as 0.0.0.0)"),
    (ipaddress.ip_network("224.0.0.0/4"), "multicast"),
    (ipaddress.ip_network("ff00::/8"), "multicast"),
)

# IPv6 ranges that carry an IPv4 address in their last 32 bits: IPv4-compatible (::a.b.c.d),
# IPv4-translated (::ffff:0:a.b.c.d, RFC 2765) and NAT64 (RFC 6052's well-known prefix and
# RFC 8215's local-use one). A NAT64 gateway forwards `64:ff9b::a9fe:a9fe` to 169.254.169.254.
_EMBEDDING_V4 = (
    ipaddress.ip_network("::/96"),
    ipaddress.ip_network("::ffff:0:0:0/96"),
    ipaddress.ip_network("64:ff9b::/96"),
    ipaddress.ip_network("64:ff9b:1::/48"),
)

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


#: The answers a policy keeps of each kind before it empties them.
MAX_ANSWERS = 8192


@dataclass(frozen=True, slots=True)
class TargetPolicy:
    """`SPECDEC_ALLOWED_TARGETS`: networks, exact host names and `*.suffix` patterns.

    Empty means anywhere except the always-denied ranges (link-local, known cloud metadata
    addresses, 0.0.0.0/8 and `::`, multicast) and metadata host names; an always-denied
    address is allowed only by a listed network that contains it, a metadata name only by name.
    An IPv6 address that embeds an IPv4 one (mapped, compatible, translated, NAT64, 6to4,
    Teredo) is refused if either is.
    """

    networks: tuple[IPNetwork, ...] = ()
    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    # Its answers by (host, address), and by (None, address) for an address whatever its
    # name: asked for every scrape of every target, and parsing the address and testing it
    # against each network each time would be a large part of a scrape's work. Emptied whole
    # past MAX_ANSWERS (a hostile team's churning names); the policy never changes, so an
    # answer never goes stale.
    _answers: dict[tuple[str | None, str], str | None] = field(
        default_factory=dict, compare=False, repr=False
    )

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

    def metadata_refusal(self, host: str) -> str | None:
        """Why `host` is refused as a cloud metadata name (asked before any resolution)."""
        if host in METADATA_NAMES and host not in self.names:
            return (
                f"{host} is a cloud metadata service; "
                "list it in SPECDEC_ALLOWED_TARGETS to allow it"
            )
        return None

    def name_refusal(self, host: str) -> str | None:
        """Why the collector may not connect to `host` by its name alone, or None: what can be
        checked of a target that a proxy resolves (a metadata name, an allow-list of names)."""
        refused = self.metadata_refusal(host)
        if refused is None and self.restricted and not is_ip(host) and not self.name_allowed(host):
            refused = f"{host} is not in SPECDEC_ALLOWED_TARGETS"
        return refused

    def refusal(self, host: str, address: str) -> str | None:
        """Why the collector may not connect to `address` (resolved from `host`), or None."""
        return self._answered(host, address)

    def denied_address_refusal(self, address: str) -> str | None:
        """Why `address` is refused whatever name it is reached by (an always-denied range no
        listed network allows), or None: what is checked of the addresses a proxied name
        resolves to here."""
        return self._answered(None, address)

    def _answered(self, host: str | None, address: str) -> str | None:
        key = (host, address)
        if key not in self._answers:
            if len(self._answers) >= MAX_ANSWERS:
                self._answers.clear()
            found = _denied(self, address) if host is None else _refusal(self, host, address)
            self._answers[key] = found
        return self._answers[key]


def _refusal(policy: TargetPolicy, host: str, address: str) -> str | None:
    named = policy.metadata_refusal(host) or policy.denied_address_refusal(address)
    if named is not None:
        return named
    ip = ipaddress.ip_address(address)
    listed = any(form in network for form in [ip, *_embedded_v4(ip)] for network in policy.networks)
    if policy.restricted and not listed and not policy.name_allowed(host):
        return f"{host} ({ip}) is not in SPECDEC_ALLOWED_TARGETS"
    return None


def _denied(policy: TargetPolicy, address: str) -> str | None:
    ip = ipaddress.ip_address(address)
    forms = [ip, *_embedded_v4(ip)]
    if any(form in network for form in forms for network in policy.networks):
        return None
    for form in forms:
        for network, what in _ALWAYS_DENIED:
            if form.version == network.version and form in network:
                shown = form if form == ip else f"{form} (in {ip})"
                return f"address {shown} is {what}; list it in SPECDEC_ALLOWED_TARGETS to allow it"
    return None


def _embedded_v4(ip: IPAddress) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (a gateway or the stack may reach them)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    found = [v4 for v4 in (ip.ipv4_mapped, ip.sixtofour) if v4 is not None]
    if ip.teredo is not None:
        found += list(ip.teredo)
    # `::` and `::1` are in ::/96 too, but are themselves, not 0.0.0.0 and 0.0.0.1.
    if int(ip) > 1 and any(ip in network for network in _EMBEDDING_V4):
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def is_ip(host: str) -> bool:
    """Whether `host` is an IP address literal."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
