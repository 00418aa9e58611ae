"""Waiting on a condition instead of sleeping for a guessed time."""

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], what: str, timeout_s: float = 30) -> T:
    """Call `probe` every 20 ms until it returns something other than None, and return that;
    fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while (found := probe()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what}")
        time.sleep(0.02)
    return found
