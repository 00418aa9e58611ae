"""The extraction cache of each endpoint scraped lately, as Prometheus keeps a scrape cache per
target: a target whose labels churn flushes its own cache, never another team's. A new
endpoint's cache starts from a copy of the series the last one knew."""

import threading
from collections import OrderedDict
from collections.abc import Hashable

from specdec_collector.core.exposition import (
    ExtractionCache,
    ExtractionLimits,
    Series,
    extract_spec_decode,
)

#: Entries (lines, series and label sets: `ExtractionCache`) held for all endpoints together; the
#: endpoints scraped least lately are forgotten first beyond it.
MAX_ENTRIES = 131_072

#: A new endpoint's cache starts with the series and label sets of the endpoint scraped last,
#: where that one holds at most this many.
SEED_MAX_ENTRIES = 2048


class EndpointCaches:
    """Owns one `ExtractionCache` per endpoint, within `max_entries` for the process.

    Concurrency: `extract` may be called from the event loop and from worker threads at once.
    An extraction takes its endpoint's cache out under the lock and puts it back when done, so
    no cache is read and replaced by two extractions at once; a second extraction of the same
    endpoint meanwhile reads without one (and the later one's cache is kept).
    """

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._max_entries = max_entries
        self._lock = threading.Lock()
        self._caches: OrderedDict[Hashable, ExtractionCache] = OrderedDict()
        self._entries = 0

    def extract(self, endpoint: Hashable, text: str, limits: ExtractionLimits) -> Series:
        """`extract_spec_decode` of `text`, a payload of `endpoint`, with its cache."""
        with self._lock:
            cache = self._caches.pop(endpoint, None)
            if cache is None:
                cache = self._seeded()
            else:
                self._entries -= len(cache)
        try:
            return extract_spec_decode(text, limits, cache)
        finally:
            self._put_back(endpoint, cache)

    def _seeded(self) -> ExtractionCache:
        """A new endpoint's cache, knowing the series and label sets of the endpoint scraped
        last (held here, so in use by no extraction): a fleet's servers share them, so a
        server's first scrape splits its values off instead of parsing every line. Entries
        are pure functions of their keys; the ones this endpoint does not use are flushed
        with its own."""
        cache = ExtractionCache()
        if self._caches:
            last = next(reversed(self._caches.values()))
            if len(last.series) + len(last.labels) <= SEED_MAX_ENTRIES:
                cache.series, cache.labels = dict(last.series), dict(last.labels)
        return cache

    def _put_back(self, endpoint: Hashable, cache: ExtractionCache) -> None:
        with self._lock:
            replaced = self._caches.pop(endpoint, None)
            if replaced is not None:
                self._entries -= len(replaced)
            self._caches[endpoint] = cache
            self._entries += len(cache)
            while self._entries > self._max_entries:
                _, forgotten = self._caches.popitem(last=False)
                self._entries -= len(forgotten)

    @property
    def entries(self) -> int:
        """Entries held for all endpoints."""
        return self._entries

    def __len__(self) -> int:
        return len(self._caches)
