"""Extraction speed: the fast path against prometheus_client's full parse, side by side.

Run with `make bench`. Both parsers read the same shipped vLLM-shaped payloads in the same
process, interleaved, so the ratio holds on a noisy machine even when the absolute times don't.
"""

import timeit
from collections.abc import Callable

from specdec_collector.core.exposition import extract_spec_decode, forget_parsed_lines
from tests.bench.figures import Figure, show
from tests.support.payloads import fixture
from tests.test_promtext import oracle


def full_parse(text: str) -> object:
    return oracle(text)


def cold_extract(text: str) -> object:
    """The fast path with its label cache emptied: a server seen for the first time."""
    forget_parsed_lines()
    return extract_spec_decode(text)


def best_of(function: Callable[[str], object], text: str, number: int) -> float:
    return min(timeit.repeat(lambda: function(text), number=number, repeat=7)) / number


def measure() -> list[Figure]:
    figures = []
    for name, what in (
        ("vllm_v1_dp1_k5.txt", "one engine"),
        ("vllm_v1_dp8_k5.txt", "eight engines"),
    ):
        text = fixture(name)
        assert extract_spec_decode(text) == oracle(text)  # identical numbers
        fast = best_of(extract_spec_decode, text, 200)
        cold = best_of(cold_extract, text, 200)
        full = best_of(full_parse, text, 5)
        eight = name == "vllm_v1_dp8_k5.txt"
        figures.append(
            Figure(
                f"extraction vs prometheus_client's full parse, {what} ({len(text) // 1024} KB)",
                f"{fast * 1e6:.0f} µs warm / {cold * 1e6:.0f} µs cold vs {full * 1e3:.1f} ms: "
                f"**{full / fast:.0f}x** / {full / cold:.0f}x",
                "≥ 50x" if eight else "",
                full / cold >= 50 if eight else None,
                "python -m tests.bench.bench_extract",
            )
        )
    return figures


if __name__ == "__main__":
    show(measure())
