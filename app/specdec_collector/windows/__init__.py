"""Benchmark windows: start, stop and read them, over the sources and the store.

Database work runs in the thread pool (SQLModel sessions are synchronous); scraping runs on
the event loop with the shared client. Every write transaction begins with a write, so
concurrent callers queue on SQLite's write lock (or PostgreSQL's row lock) instead of failing.

Start is two transactions on purpose: the window row first (its unique `window_id` decides
which of several concurrent starts creates it), then the baseline. A start retried after a
crash between the two finds the window and does not scrape again; its stop then reports the
missing baseline instead of inventing one.

Stop scrapes first, computes every result from what is stored (baseline, samples, final),
then closes the window in one transaction that stores the final snapshots and the results;
if a sample landed in between, that transaction computes them again, so a sample stored by
the background sampler up to that moment is part of the result, and none after it.

The modules, one job each: `stored` (what a stored window is), `storage` (its SQL),
`closing` (a stop's results and the write that stores them), `overlaps`, `views` (one
window's public view), `listing` (filters and paging), `reads` (results, comparisons,
timelines), `cache` (closed windows' results), `lifecycle` (the start and stop calls) and
`rehearsal` (a start and stop run once at start-up and rolled back).
"""
