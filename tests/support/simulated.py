"""Sampled windows over an in-process simulator: the chain of snapshots a window's samples
would read, without HTTP, for tests of the statistics over many windows."""

import random
from collections.abc import Sequence

from specdec_collector.core.exposition import Series, extract_spec_decode
from specdec_collector.simulator.server import SimulatedServer


def sampled_chain(
    rates: Sequence[float],
    intervals: int,
    seed: int,
    *,
    instances: int = 2,
    engine: str = "llamacpp",
    requests: tuple[int, int] = (1, 4),
    tokens: tuple[int, int] = (8, 64),
) -> list[Series]:
    """`intervals + 1` snapshots of a simulator of acceptance `rates` (requests only): between
    two, a random number of requests (`requests`, inclusive) of random lengths (`tokens`)."""
    server = SimulatedServer(
        instances=instances, k=len(rates), drafts_per_s=0, acceptance=rates, seed=seed,
        engine=engine,
    )  # fmt: skip
    draw = random.Random(seed)
    chain = [extract_spec_decode(server.render())]
    for _ in range(intervals):
        for _ in range(draw.randint(*requests)):
            server.generate(draw.randint(*tokens))
        chain.append(extract_spec_decode(server.render()))
    return chain
