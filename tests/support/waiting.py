"""Waiting on a condition instead of sleeping for a guessed time, for longer on a loaded machine."""

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


#: The most a wait is stretched by the machine's load.
MAX_STRETCH = 6.0


def patience(timeout_s: float) -> float:
    """`timeout_s` on an idle machine, stretched by how loaded it is (its 1-minute load per
    core, up to MAX_STRETCH times): a busy shared machine starts processes several times
    slower, and a fixed wait failed there for no fault of the code under test."""
    load_per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    return timeout_s * min(MAX_STRETCH, max(1.0, load_per_core))


def wait_for(probe: Callable[[], T | None], what: str, timeout_s: float = 30) -> T:
    """Call `probe` every 20 ms until it returns something other than None, and return that;
    fail naming `what` after `timeout_s` (longer on a loaded machine, see `patience`)."""
    timeout_s = patience(timeout_s)
    deadline = time.monotonic() + timeout_s
    while (found := probe()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what}")
        time.sleep(0.02)
    return found
