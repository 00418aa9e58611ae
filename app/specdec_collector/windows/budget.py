"""How many targets a team's starts and stops may read per second: a token bucket per team.

Background scrapes have their budget at the start of a sampled window
(SPECDEC_MAX_SCRAPES_PER_SECOND_PER_TEAM); without this, a client that starts and stops
large windows in a loop would have none, and scrape every target twice a turn. Each start
and stop takes one token per target from its team's bucket, which fills at
SPECDEC_MAX_TARGET_READS_PER_SECOND_PER_TEAM and holds two full windows' worth (a start and
its stop of the largest window always pass). A start that finds too few tokens is refused
(429, before anything is read); a stop is never refused, so no window is left open: it takes
its tokens on credit, and the team's next starts wait for them. Each replica keeps its own
buckets.
"""

import threading
import time
from dataclasses import dataclass, field

from specdec_collector.exceptions import OverReadBudget


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float  # monotonic


@dataclass(slots=True)
class ReadBudget:
    """Per team: `rate` targets a second, at most `capacity` at once."""

    rate: float
    capacity: float
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _bucket(self, team: str, now: float) -> _Bucket:
        bucket = self._buckets.get(team)
        if bucket is None:
            if len(self._buckets) > 100_000:  # teams are few; full buckets need no memory
                self._buckets = {t: b for t, b in self._buckets.items() if b.tokens < self.capacity}
            bucket = self._buckets[team] = _Bucket(self.capacity, now)
        bucket.tokens = min(self.capacity, bucket.tokens + (now - bucket.at) * self.rate)
        bucket.at = now
        return bucket

    def start(self, team: str, targets: int) -> None:
        """Take a start's tokens, or `OverReadBudget` (nothing taken)."""
        with self._lock:
            bucket = self._bucket(team, time.monotonic())
            if bucket.tokens < targets:
                wait_s = (targets - bucket.tokens) / self.rate
                raise OverReadBudget(
                    f"team {team}'s starts and stops read more than {self.rate:g} targets per "
                    f"second (SPECDEC_MAX_TARGET_READS_PER_SECOND_PER_TEAM); this start's "
                    f"{targets} fit in {wait_s:.1f} s"
                )
            bucket.tokens -= targets

    def stop(self, team: str, targets: int) -> None:
        """Take a stop's tokens, on credit if need be."""
        with self._lock:
            self._bucket(team, time.monotonic()).tokens -= targets
