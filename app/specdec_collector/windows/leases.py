"""Sampler leases: how long a replica holds a sampled window from its last renewal.

A lease lasts `LEASE_INTERVALS` sampling intervals, so one late run does not lose it and a
replica that died gives the window up within two intervals. The replica that starts a window
holds a first lease long enough for the baseline scrape as well.

The holder renews the lease with each sample it stores, and apart only when the lease it last
wrote has less than `RENEWAL_MARGIN_INTERVALS` left (or it does not know it): a run that starts
late renews before it scrapes, and a scrape that runs long renews as it goes, so neither loses
the lease; a run on time whose scrape is short writes once.
"""

LEASE_INTERVALS = 1.5
"""A sampler lease lasts this many sampling intervals from its last renewal."""

RENEWAL_MARGIN_INTERVALS = 0.25
"""A lease with less than this many intervals left is renewed before it is relied on. A run
on time starts with ~0.5 interval left (the last store's 1.5, less the interval since): the
scrape gets a quarter interval before renewing, and the renewal a quarter interval to land."""


def lease_seconds(interval_s: float) -> float:
    """How long a lease renewed now holds, for a window sampled every `interval_s`."""
    return LEASE_INTERVALS * interval_s


def first_lease_seconds(interval_s: float, scrape_timeout_s: float) -> float:
    """The starting replica's first lease: the baseline scrape and then a renewal's worth."""
    return lease_seconds(interval_s) + scrape_timeout_s


def renewal_margin_s(interval_s: float) -> float:
    """The time left on a lease below which its holder renews it."""
    return RENEWAL_MARGIN_INTERVALS * interval_s


def renewal_due(lease_end: float | None, now: float, interval_s: float) -> bool:
    """Whether a lease that ends at `lease_end` (`None`: not known) is to be renewed at `now`."""
    return lease_end is None or lease_end - now < renewal_margin_s(interval_s)
