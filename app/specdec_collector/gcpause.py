"""Garbage collection: how often it runs, and paused while a large piece of work makes objects
that all live on.

CPython's collector runs after every few hundred new container objects, and a full collection
walks every object made since start-up (those made before it are frozen, `service.main`). A
Prometheus answer read into scrapes, or a fleet's stop computed, makes hundreds of thousands
of objects that stay alive until the work ends: each collection they set off walks them all
again, for nothing, since reference counting frees them when the work is done. Collections
resume after the work: objects it left in cycles are found by the next one.

And it runs less often than CPython's default (`tune_collections`): a young collection after
50,000 objects more alive, not 700. The count is of objects made less those freed, and reference
counting frees almost all of a request's at once, so what sets a collection off is what
lives on (the caches, open windows, answers in flight), and each collection walks again what
the last ones left: at CPython's default, a loaded collector spent much of its time there
(`make bench`'s load figures guard it).
"""

import gc
from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


#: Objects made (less those freed) before a young collection; young collections before a
#: middle one; middle ones before a full one (which CPython also holds back until a quarter
#: of the objects it would walk are new).
THRESHOLDS = (50_000, 20, 10)


def tune_collections() -> None:
    """Set this process's collection thresholds (`THRESHOLDS`)."""
    gc.set_threshold(*THRESHOLDS)


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
