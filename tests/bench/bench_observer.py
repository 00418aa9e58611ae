"""What watching costs the engine: generated tokens/s of a real engine with and without a window.

The real engines of the real-engine tier (`make engines`: llama.cpp and vLLM on CPU serving the
same small model) take the same greedy requests three ways, in rounds whose order rotates: with
no window open, inside a window sampled every 1 s, and inside one sampled every 0.25 s. Each
round gives a ratio per condition (its tokens/s over the unwatched run of the same round); the
figure is the median of those ratios, with their range: on a shared 2-core machine one run's
tokens/s moves by several percent, a pairing within the round takes out the slower drift.

Beside it, what one scrape costs the engine: the time its `/metrics` takes to answer on an idle
engine (median and p95 of 40), which the engine's API server spends rendering it.

The collector runs on the same machine as the engine here (its CPU is the engine's too); in a
deployment it runs elsewhere, so these ratios are a bound on the cost, not its measure.
"""

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import httpx

from specdec_collector.cli.runner import generate_load
from tests.bench.figures import Figure, show
from tests.real_engines import provision, servers
from tests.support.collector import CollectorProcess, run_collector
from tests.support.metrics_server import free_port

COMMAND = "python -m tests.bench.bench_observer"
# A multiple of the conditions: each order of the rotation comes as often as the others, so a
# run's place in its round (after which other run) weighs on every ratio alike.
ROUNDS = 9
CONDITIONS: tuple[float | None, ...] = (None, 1.0, 0.25)  # no window, then sampled every S s
TARGETS = {1.0: 0.99, 0.25: 0.97}  # tokens/s watched over unwatched, at the least
METRICS_GETS = 40


def _tokens_per_s(
    engine: servers.Engine,
    collector: CollectorProcess,
    interval_s: float | None,
    load: dict[str, int],
) -> float:
    """One run of the load, inside a window sampled every `interval_s` (None: no window)."""
    api = httpx.Client(base_url=collector.base_url, timeout=60)
    window_id = f"observer-{time.monotonic_ns()}"
    if interval_s is not None:
        body = {"targets": [engine.target], "sample_interval_s": interval_s}
        answer = api.post(f"/windows/{window_id}/start", json=body)
        answer.raise_for_status()
    try:
        summary = asyncio.run(
            generate_load(
                engine.base,
                load["requests"],
                load["concurrency"],
                load["max_tokens"],
                model=servers.MODEL,
                temperature=0.0,
            )
        )
    finally:
        if interval_s is not None:
            api.post(f"/windows/{window_id}/stop").raise_for_status()
        api.close()
    if summary.failed:
        raise RuntimeError(
            f"{engine.name}: {summary.failed} requests failed: {summary.first_failure}"
        )
    return summary.completion_tokens / summary.seconds


def _metrics_answer_ms(engine: servers.Engine) -> tuple[float, float]:
    """Median and p95 of the time the engine's `/metrics` takes to answer, idle."""
    times = []
    with httpx.Client(timeout=10) as client:
        client.get(f"{engine.base}/metrics").raise_for_status()  # its connection made
        for _ in range(METRICS_GETS):
            began = time.perf_counter()
            client.get(f"{engine.base}/metrics").raise_for_status()
            times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times), statistics.quantiles(times, n=20)[-1]


def _measure_engine(
    name: str, start: Callable[[int, Path], AbstractContextManager[servers.Engine]],
    load: dict[str, int], folder: Path,
) -> list[Figure]:  # fmt: skip
    with (
        start(free_port(), folder / f"{name}.log") as engine,
        run_collector(f"sqlite:///{folder / f'{name}.db'}", folder) as collector,
    ):
        _tokens_per_s(engine, collector, None, load)  # warm: caches, compiled graphs
        render = _metrics_answer_ms(engine)
        runs: dict[float | None, list[float]] = {c: [] for c in CONDITIONS}
        for round_ in range(ROUNDS):
            shift = round_ % len(CONDITIONS)
            for condition in CONDITIONS[shift:] + CONDITIONS[:shift]:
                runs[condition].append(_tokens_per_s(engine, collector, condition, load))
    bare = runs[None]
    figures = [
        Figure(
            f"{name}: generated tokens/s without a window ({ROUNDS} runs of "
            f"{load['requests']} greedy requests x {load['max_tokens']} tokens, "
            f"{load['concurrency']} at a time)",
            f"median {statistics.median(bare):.1f} (runs {min(bare):.1f}-{max(bare):.1f})",
            command=COMMAND,
        ),
        Figure(
            f"{name}: time its own `/metrics` takes to answer, idle ({METRICS_GETS} gets)",
            f"median {render[0]:.2f} ms, p95 {render[1]:.2f} ms",
            command=COMMAND,
        ),
    ]
    for interval_s, target in TARGETS.items():
        ratios = [w / b for w, b in zip(runs[interval_s], bare, strict=True)]
        ratio = statistics.median(ratios)
        figures.append(
            Figure(
                f"{name}: tokens/s inside a window sampled every {interval_s:g} s vs without "
                "(same round, order rotating)",
                f"**{ratio:.3f} x** (rounds {min(ratios):.3f}-{max(ratios):.3f})",
                f"≥ {target} x",
                ratio >= target,
                COMMAND,
            )
        )
    return figures


def measure() -> list[Figure]:
    provision.llamacpp()  # each installed on first use into .engines (`make engines`)
    provision.vllm()
    provision.model()
    with tempfile.TemporaryDirectory() as folder:
        return [
            *_measure_engine(
                "llama.cpp", servers.llama, {"requests": 16, "concurrency": 2, "max_tokens": 64},
                Path(folder),
            ),
            *_measure_engine(
                "vLLM (CPU)", servers.vllm, {"requests": 16, "concurrency": 4, "max_tokens": 48},
                Path(folder),
            ),
        ]  # fmt: skip


if __name__ == "__main__":
    show(measure())
