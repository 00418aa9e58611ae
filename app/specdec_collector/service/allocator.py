"""The C allocator's thresholds for `specdec serve` and its workers, set in their environment
(glibc only).

A scrape of a large server reads hundreds of KB: the answer's pieces joined, then decoded to
text, each a block of its size. glibc serves a block above 128 KB (its mmap threshold) with
fresh pages mapped for it and unmapped when it is freed, so every large answer paid a page fault
per page of each copy. With the thresholds raised, such blocks come from the heap and are
reused. Blocks past the new mmap threshold (a 16 MB answer) are still mapped apart, and the
heap gives memory back to the system above the trim threshold of free space at its top.

glibc reads these settings (`GLIBC_TUNABLES`) only when a process starts, so `specdec serve`
starts itself again, in place, once with them in its environment; its workers inherit it. An
environment that names the allocator's settings already (the image does, and an operator may)
is left as it is.
"""

import os
import sys
from collections.abc import Mapping

MMAP_THRESHOLD = 4 * 1024 * 1024
TRIM_THRESHOLD = 32 * 1024 * 1024
TUNABLES = (
    f"glibc.malloc.mmap_threshold={MMAP_THRESHOLD}:glibc.malloc.trim_threshold={TRIM_THRESHOLD}"
)
_OWN_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def _glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):  # not a GNU C library (musl, macOS)
        return False


def allocator_environment(environ: Mapping[str, str]) -> dict[str, str] | None:
    """`environ` with the allocator's settings added; None where it needs none: it names the
    allocator's settings already, or the C library is not glibc."""
    tunables = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc" in tunables or any(name in environ for name in _OWN_SETTINGS):
        return None
    if not _glibc():
        return None
    return {**environ, "GLIBC_TUNABLES": f"{tunables}:{TUNABLES}" if tunables else TUNABLES}


def start_with_tuned_allocator() -> None:
    """Start this process again, in place (the same process id), with the allocator's
    settings in its environment, unless it needs none (`allocator_environment`)."""
    environ = allocator_environment(os.environ)
    if environ is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environ)
