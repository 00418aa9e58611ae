"""Benchmark windows: start, stop and read them, over the sources and the store.

Scraping runs on the event loop with the shared client. Database work is synchronous
(SQLModel sessions) and goes through the store (`store.store.Store`), which decides where it
runs: the window calls say what to run (a lookup of a few rows, a write in the lane of its
team or window, a stop's computation and how many readings it has), never which thread.
Concurrent writers queue instead of failing: on SQLite they take turns on the collector's
write lock, on PostgreSQL on the row's or the team's lock.

Start is two transactions on purpose: the window row first (its unique `window_id` decides
which of several concurrent starts creates it), then the baseline. A start retried after a
crash between the two finds the window and does not scrape again; its stop then reports the
missing baseline instead of inventing one.

Stop scrapes first, computes every result from what is stored (baseline, samples, final),
then closes the window in one transaction that stores the final snapshots and the results;
if a sample landed in between, that transaction computes them again, so a sample stored by
the background sampler up to that moment is part of the result, and none after it.

The modules, one job each: `service` (the facade the routes call), `stored` (what a stored
window is), `storage` (its SQL), `catalogue` (the series snapshots name), `closing` (a stop's
results and the write that stores them), `overlaps`, `views` (one window's public view),
`answers` (what the calls answer), `listing` (filters and paging), `reads` (results,
comparisons, timelines), `cache` (closed windows' results, open windows' views), `budget`
(targets read per second), `leases` (the sampler's), `lifecycle` (the start and stop calls)
and `rehearsal` (a start and stop run once at start-up and rolled back).
"""
