"""Where a scrape may connect: the target policy applied to every address a name resolves
to, and the request pinned to the address checked (no DNS rebinding in between)."""

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from specdec_collector.core.targets import Target, is_ip
from specdec_collector.sources.scrape.config import ScrapeConfig
from specdec_collector.sources.scrape.resolver import RESOLVING_FOR
from specdec_collector.sources.scrape.routes import ROUTE, Route, route_of


class Refused(Exception):
    """The policy does not let the collector connect to this target."""


class Unresolved(Exception):
    """The target's name does not resolve (not a refusal: its scrape says why)."""

    pass


class Pin(NamedTuple):
    """Where a scrape's request goes: the URL (the checked address in it), its headers and
    request extensions (the TLS server name)."""

    url: str
    headers: dict[str, str]
    extensions: dict[str, Any]


async def pin(target: Target, config: ScrapeConfig) -> Pin:
    """The URL, headers and request extensions that reach the address the policy checked,
    by the route `routes.route_of` decided (the extension `ROUTE` tells the transport).

    Straight to the server (no proxy, or one NO_PROXY bypasses), the host name is resolved
    once and every address checked; the request then goes to the first address, with the
    original `Host` (and TLS server name), so a DNS answer that changes between the check and
    the connection cannot redirect it. Through an HTTP proxy the proxy resolves the name: the
    name rules are checked, and the addresses the name resolves to here, if it does, must not
    be always-denied ones (a cloud metadata address); the proxy's own answer cannot be seen.
    """
    headers = dict(target.headers)
    scheme = urlsplit(target.url).scheme
    route = route_of(scheme, target.host, target.port, config.proxies)
    named = config.policy.metadata_refusal(target.host)
    if named is not None:  # before resolving: such a name may not even resolve here
        raise Refused(named)
    if route is Route.PROXIED:
        await _check_proxied(target, config)
        return Pin(target.url, headers, {ROUTE: route})
    if is_ip(target.host):
        addresses = [target.host]
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
    extensions: dict[str, Any] = {ROUTE: route}
    if is_ip(target.host):
        return Pin(target.url, headers, extensions)
    parts = urlsplit(target.url)
    address = addresses[0]
    netloc = f"[{address}]:{target.port}" if ":" in address else f"{address}:{target.port}"
    headers["Host"] = parts.netloc
    if parts.scheme == "https":
        extensions["sni_hostname"] = target.host
    return Pin(urlunsplit(parts._replace(netloc=netloc)), headers, extensions)


async def _check_proxied(target: Target, config: ScrapeConfig) -> None:
    """`Refused` if the proxy may not be asked for `target`: a name the rules refuse, or one
    that resolves here to an always-denied address (a name that does not resolve here is the
    proxy's to resolve, and so is one slow to resolve here)."""
    if is_ip(target.host):
        reason = config.policy.refusal(target.host, target.host)
        if reason is not None:
            raise Refused(reason)
        return
    reason = config.policy.name_refusal(target.host)
    if reason is not None:
        raise Refused(reason)
    try:
        async with asyncio.timeout(config.timeout_s / 2):  # the rest is the proxy's
            addresses = await config.resolve(target.host, target.port)
    except (OSError, TimeoutError):
        return
    for address in addresses:
        reason = config.policy.denied_address_refusal(address)
        if reason is not None:
            raise Refused(f"{target.host} resolves to a refused address: {reason}")


#: Told where the scrape of a target that is not refused will connect: its URL and extensions.
Allowed = Callable[[str, dict[str, Any]], None]


async def pins(
    targets: Sequence[Target],
    config: ScrapeConfig,
    allowed: Allowed | None = None,
    team: str = "",
) -> list[Pin | Refused | None]:
    """Where each target's scrape connects, or why it may not (`Refused`), or None for a name
    that does not resolve (not refused: its scrape says why), checked once for all of them.
    The names resolve in `team`'s share of the resolver (`resolver.RESOLVING_FOR`): one
    team's names that never answer do not hold another's.

    `allowed` is told, as each is checked, where the scrape of a target not refused connects.
    """
    RESOLVING_FOR.set(team)  # the checks below copy this context

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
