"""Where a scrape may connect: the target policy applied to every address a name resolves
to, and the request pinned to the address checked (no DNS rebinding in between)."""

import asyncio
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from specdec_collector.core.targets import Target, is_ip
from specdec_collector.sources.scrape.config import ScrapeConfig


class Refused(Exception):
    """The policy does not let the collector connect to this target."""


class Unresolved(Exception):
    """The target's name does not resolve (not a refusal: its scrape says why)."""

    pass


def _proxy_route(target: Target, proxies: dict[str, str]) -> str:
    """`proxied`, `bypassed` (a proxy is set but NO_PROXY names the host) or `direct`."""
    if urlsplit(target.url).scheme not in proxies:
        return "direct"
    # What `proxy_bypass` does on Linux, given the proxies read once (typeshed omits it).
    bypassed = urllib.request.proxy_bypass_environment(target.host, proxies)  # type: ignore[attr-defined]
    return "bypassed" if bypassed else "proxied"


class Pin(NamedTuple):
    """Where a scrape's request goes: the URL (the checked address in it), its headers and
    request extensions (the TLS server name)."""

    url: str
    headers: dict[str, str]
    extensions: dict[str, Any]


async def pin(target: Target, config: ScrapeConfig) -> Pin:
    """The URL, headers and request extensions that reach the address the policy checked.

    The host name is resolved once and every address checked; the request then goes to the
    first address, with the original `Host` (and TLS server name), so a DNS answer that
    changes between the check and the connection cannot redirect it. Through an HTTP proxy
    the proxy resolves names: only IP literals and the name rules are checked there. A host
    that NO_PROXY exempts from a configured proxy is checked but keeps its name in the URL
    (httpx would send a rewritten address through the proxy).
    """
    headers = dict(target.headers)
    route = _proxy_route(target, config.proxies)
    named = config.policy.metadata_refusal(target.host)
    if named is not None:  # before resolving: such a name may not even resolve here
        raise Refused(named)
    if is_ip(target.host):
        addresses = [target.host]
    elif route == "proxied":
        reason = config.policy.name_refusal(target.host)
        if reason is not None:
            raise Refused(reason)
        return Pin(target.url, headers, {})
    else:
        try:
            addresses = await config.resolve(target.host, target.port)
        except OSError as exc:
            raise Unresolved(f"cannot resolve {target.host}: {exc}") from None
        if not addresses:
            raise Unresolved(f"cannot resolve {target.host}: no address")
    for address in addresses:
        reason = config.policy.refusal(target.host, address)
        if reason is not None:
            raise Refused(reason)
    if is_ip(target.host) or route == "bypassed":
        return Pin(target.url, headers, {})
    parts = urlsplit(target.url)
    address = addresses[0]
    netloc = f"[{address}]:{target.port}" if ":" in address else f"{address}:{target.port}"
    headers["Host"] = parts.netloc
    extensions: dict[str, Any] = {}
    if parts.scheme == "https":
        extensions["sni_hostname"] = target.host
    return Pin(urlunsplit(parts._replace(netloc=netloc)), headers, extensions)


#: Told where the scrape of a target that is not refused will connect: its URL and extensions.
Allowed = Callable[[str, dict[str, Any]], None]


async def pins(
    targets: Sequence[Target], config: ScrapeConfig, allowed: Allowed | None = None
) -> list[Pin | Refused | None]:
    """Where each target's scrape connects, or why it may not (`Refused`), or None for a name
    that does not resolve (not refused: its scrape says why), checked once for all of them.

    `allowed` is told, as each is checked, where the scrape of a target not refused connects.
    """

    async def check(target: Target) -> Pin | Refused | None:
        try:
            async with asyncio.timeout(config.timeout_s):
                pinned = await pin(target, config)
        except Refused as exc:
            return exc
        except Exception:
            # Unresolved, slow to resolve, or anything else: not refused; its scrape says why.
            return None
        if allowed is not None:
            allowed(pinned.url, pinned.extensions)
        return pinned

    return list(await asyncio.gather(*(check(target) for target in targets)))
