"""Extraction speed: the fast path against prometheus_client's full parse, side by side.

Run with `make bench`. Both parsers read the same shipped vLLM-shaped payloads in the same
process, interleaved, so the ratio holds on a noisy machine even when the absolute times don't.
Three ways: warm (the same answer again: an idle server), busy (every counter read has a new
value, as a busy server's next answer: its lines are new, its series known) and cold (a new
cache: a server seen for the first time).
"""

import time
import timeit
from collections.abc import Callable

from specdec_collector.core.counters import SAMPLE_NAMES
from specdec_collector.core.exposition import ExtractionCache, extract_spec_decode
from tests.bench.figures import Figure, show
from tests.core.test_exposition import oracle
from tests.support.payloads import fixture


def full_parse(text: str) -> object:
    return oracle(text)


def cold_extract(text: str) -> object:
    """The fast path with a new cache: a server seen for the first time."""
    return extract_spec_decode(text, cache=ExtractionCache())


def warm_extract(cache: ExtractionCache) -> Callable[[str], object]:
    """The fast path with the endpoint's cache: the same answer again (an idle server)."""
    return lambda text: extract_spec_decode(text, cache=cache)


def best_of(function: Callable[[str], object], text: str, number: int) -> float:
    return min(timeit.repeat(lambda: function(text), number=number, repeat=7)) / number


def busy_answers(text: str, count: int) -> list[str]:
    """`count` answers of the server that answered `text`, each with a new value in every
    counter the collector reads (its `_created` times stay)."""
    lines = text.split("\n")
    counted = [
        index
        for index, line in enumerate(lines)
        if (name := line.partition("{")[0].partition(" ")[0]) in SAMPLE_NAMES
        and not name.endswith("_created")
    ]
    answers = []
    for step in range(1, count + 1):
        changed = list(lines)
        for index in counted:
            head, _, value = changed[index].rpartition(" ")
            changed[index] = f"{head} {float(value) + step:.6e}"
        answers.append("\n".join(changed))
    return answers


def best_busy(text: str, number: int, repeat: int = 5) -> float:
    """Seconds per extraction of a busy server's next answer: the best of `repeat` runs, each
    over `number` answers none of which was read before."""
    answers = busy_answers(text, number * repeat)
    cache = ExtractionCache()
    extract_spec_decode(text, cache=cache)  # its series known
    runs = []
    for run in range(repeat):
        began = time.perf_counter()
        for answer in answers[run * number : (run + 1) * number]:
            extract_spec_decode(answer, cache=cache)
        runs.append((time.perf_counter() - began) / number)
    return min(runs)


def measure() -> list[Figure]:
    figures = []
    for name, what in (
        ("vllm_v1_dp1_k5.txt", "one engine"),
        ("vllm_v1_dp8_k5.txt", "eight engines"),
    ):
        text = fixture(name)
        assert extract_spec_decode(text) == oracle(text)  # identical numbers
        fast = best_of(warm_extract(ExtractionCache()), text, 200)
        busy = best_busy(text, 20)
        cold = best_of(cold_extract, text, 200)
        full = best_of(full_parse, text, 5)
        eight = name == "vllm_v1_dp8_k5.txt"
        figures.append(
            Figure(
                f"extraction vs prometheus_client's full parse, {what} ({len(text) // 1024} KB)",
                f"{fast * 1e6:.0f} µs warm / {busy * 1e6:.0f} µs busy / {cold * 1e6:.0f} µs cold "
                f"vs {full * 1e3:.1f} ms: **{full / fast:.0f}x** / {full / busy:.0f}x / "
                f"{full / cold:.0f}x",
                "≥ 50x" if eight else "",
                full / cold >= 50 if eight else None,
                "python -m tests.bench.bench_extract",
            )
        )
    return figures


if __name__ == "__main__":
    show(measure())
