"""Extraction speed: the fast path against prometheus_client's full parse, side by side.

Run with `make bench`. Both parsers read the same shipped vLLM-shaped payloads in the same
process, interleaved, so the ratio holds on a noisy machine even when the absolute times don't.
"""

import timeit
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from app.promtext import _parse_labels, extract_spec_decode
from tests.payloads import fixture
from tests.test_promtext import oracle


def full_parse(text: str) -> object:
    return oracle(text)


def cold_extract(text: str) -> object:
    """The fast path with its label cache emptied: a server seen for the first time."""
    _parse_labels.cache_clear()
    return extract_spec_decode(text)


def best_of(function: Callable[[str], object], text: str, number: int) -> float:
    return min(timeit.repeat(lambda: function(text), number=number, repeat=7)) / number


def main() -> None:
    print(
        f"{'payload':<22} {'size':>7} {'fast (warm)':>12} {'fast (cold)':>12} "
        f"{'prometheus_client':>18} {'ratio warm/cold':>16}"
    )
    for name in ("vllm_v1_dp1_k5.txt", "vllm_v1_dp8_k5.txt"):
        text = fixture(name)
        assert extract_spec_decode(text) == oracle(text)
        fast = best_of(extract_spec_decode, text, 200)
        cold = best_of(cold_extract, text, 200)
        full = best_of(full_parse, text, 5)
        print(
            f"{name:<22} {len(text) // 1024:>5}KB {fast * 1e6:>10.1f}us {cold * 1e6:>10.1f}us "
            f"{full * 1e6:>16.1f}us {full / fast:>9.0f}x/{full / cold:.0f}x"
        )
    families = sum(1 for _ in text_string_to_metric_families(fixture("vllm_v1_dp8_k5.txt")))
    print(f"(the dp8 payload holds {families} families; the fast path reads 64 of its lines)")


if __name__ == "__main__":
    main()
