"""The C allocator's thresholds: a large answer's copies reuse heap blocks instead of fresh
pages (counted as minor page faults of a process of their own)."""

import os
import subprocess
import sys

COPIES = """
import resource, sys
from specdec_collector.service.allocator import tune_allocator
print(tune_allocator() if sys.argv[1] == "tune" else None)
body = bytes(350_000)  # an eight-instance answer
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    copy = bytes(bytearray(body))
    text = copy.decode()
    del copy, text
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, **env: str) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", COPIES, mode],
        capture_output=True, text=True, check=True, env={**os.environ, **env},
    )  # fmt: skip
    tuned, faults = done.stdout.split()
    return tuned, int(faults)


def test_large_blocks_come_from_the_heap_once_tuned() -> None:
    pages = 350_000 // 4096
    tuned, untouched = _faults("tune"), _faults("leave")
    assert tuned[0] == "True" and untouched[0] == "None"
    # Three fresh blocks per round untuned (the copy, the bytes, the text): a fault per page.
    assert untouched[1] >= 100 * pages
    assert tuned[1] < pages * 5  # the first rounds' blocks, then the same ones again


def test_the_environments_own_settings_win() -> None:
    assert _faults("tune", MALLOC_MMAP_THRESHOLD_="131072")[0] == "False"
    assert _faults("tune", GLIBC_TUNABLES="glibc.malloc.mmap_threshold=131072")[0] == "False"
