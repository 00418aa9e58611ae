"""When a sampler renews its lease apart from the sample it stores: the rule, on its own
clock (how often it happens on a real machine is `make bench`'s: `bench_sampler`)."""

import pytest

from specdec_collector.windows.leases import (
    LEASE_INTERVALS,
    first_lease_seconds,
    lease_seconds,
    renewal_due,
)

INTERVAL_S = 0.25


def test_a_lease_not_known_is_renewed() -> None:
    assert renewal_due(None, 1000.0, INTERVAL_S)


@pytest.mark.parametrize("late_s", [0.0, 0.2 * INTERVAL_S])
def test_a_run_on_time_relies_on_the_lease_its_last_sample_wrote(late_s: float) -> None:
    stored_at = 1000.0
    lease_end = stored_at + lease_seconds(INTERVAL_S)
    assert not renewal_due(lease_end, stored_at + INTERVAL_S + late_s, INTERVAL_S)


@pytest.mark.parametrize("late_s", [0.3 * INTERVAL_S, INTERVAL_S, 10 * INTERVAL_S])
def test_a_late_run_renews_before_it_scrapes(late_s: float) -> None:
    stored_at = 1000.0
    lease_end = stored_at + lease_seconds(INTERVAL_S)
    assert renewal_due(lease_end, stored_at + INTERVAL_S + late_s, INTERVAL_S)


def test_the_first_lease_covers_the_baseline_scrape() -> None:
    assert first_lease_seconds(INTERVAL_S, 5.0) == LEASE_INTERVALS * INTERVAL_S + 5.0
