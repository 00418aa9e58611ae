"""Sampler leases: how long a replica holds a sampled window from its last renewal.

A lease lasts `LEASE_INTERVALS` sampling intervals, so one late run does not lose it and a
replica that died gives the window up within two intervals. The replica that starts a window
holds a first lease long enough for the baseline scrape as well.
"""

LEASE_INTERVALS = 1.5
"""A sampler lease lasts this many sampling intervals from its last renewal."""


def lease_seconds(interval_s: float) -> float:
    """How long a lease renewed now holds, for a window sampled every `interval_s`."""
    return LEASE_INTERVALS * interval_s


def first_lease_seconds(interval_s: float, scrape_timeout_s: float) -> float:
    """The starting replica's first lease: the baseline scrape and then a renewal's worth."""
    return lease_seconds(interval_s) + scrape_timeout_s
