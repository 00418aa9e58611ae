"""Garbage collection paused while a large piece of work makes objects that all live on.

CPython's collector runs after every few hundred new container objects, and a full collection
walks every object made since start-up (those made before it are frozen, `service.main`). A
Prometheus answer read into scrapes, or a fleet's stop computed, makes hundreds of thousands
of objects that stay alive until the work ends: each collection they set off walks them all
again, for nothing, since reference counting frees them when the work is done (a 7 MB answer
parsed in 113 ms with collections, 38 ms without; a 1,024-target stop read from Prometheus
spent about a third of its CPU collecting). Collections resume after the work: objects it
left in cycles are found by the next one.
"""

import gc
from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def uncollected(func: Callable[P, R]) -> Callable[P, R]:
    """`func`, run with collections paused (in any thread: the pause is the process's, and
    they resume when the last of the paused calls that found them running ends)."""

    @wraps(func)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        resume = gc.isenabled()
        gc.disable()
        try:
            return func(*args, **kwargs)
        finally:
            if resume:
                gc.enable()

    return paused
