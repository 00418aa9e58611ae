"""`make bench`: every benchmark in one run, then the table of docs/performance.md.

python -m tests.bench                 # all, and rewrite that table
python -m tests.bench extract start   # some of them; the docs are left alone
"""

import importlib
import sys

from tests.bench.figures import Figure, show, write_table

BENCHMARKS = [
    "extract",
    "start",
    "fleet",
    "scrape_cost",
    "sampler",
    "api",
    "growth",
    "storage",
    "statements",
    "replicas",
    "load",
    "knobs",
    "prometheus_source",
    "attacks",
    "observer",
]


def main() -> None:
    chosen = sys.argv[1:] or BENCHMARKS
    unknown = set(chosen) - set(BENCHMARKS)
    if unknown:
        sys.exit(f"unknown benchmarks {sorted(unknown)}; choose from {BENCHMARKS}")
    figures: list[Figure] = []
    for name in chosen:
        print(f"== {name}", flush=True)
        module = importlib.import_module(f"tests.bench.bench_{name}")
        try:
            measured: list[Figure] = module.measure()
        except (Exception, SystemExit) as exc:  # one broken benchmark must not hide the others
            measured = [
                Figure(name, f"failed: {exc!r}", "runs", False, f"python -m {module.__name__}")
            ]
        show(measured)
        figures += measured
    if chosen == BENCHMARKS:
        write_table(figures)
        print("docs/performance.md: the table rewritten")
    missed = [figure.what for figure in figures if figure.met is False]
    if missed:
        sys.exit("targets not met: " + "; ".join(missed))


if __name__ == "__main__":
    main()
