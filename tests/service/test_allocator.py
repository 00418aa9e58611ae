"""The C allocator's thresholds: a large answer's copies reuse heap blocks instead of fresh
pages (counted as minor page faults of a process of their own), once `specdec serve`'s start
put the settings into its environment."""

import os
import subprocess
import sys
from pathlib import Path

from specdec_collector.service.allocator import TUNABLES, allocator_environment

COPIES = """
import os, resource, sys
from specdec_collector.service.allocator import start_with_tuned_allocator
if sys.argv[1] == "tune":
    start_with_tuned_allocator()
print(os.getpid(), os.environ.get("GLIBC_TUNABLES", "-"))
body = bytes(350_000)  # an eight-instance answer
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    copy = bytes(bytearray(body))
    text = copy.decode()
    del copy, text
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, **env: str) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES",)} | env
    done = subprocess.Popen(
        [sys.executable, "-c", COPIES, mode], stdout=subprocess.PIPE, text=True, env=environ
    )
    out, _ = done.communicate(timeout=60)
    assert done.returncode == 0
    said, faults = out.splitlines()
    pid, tunables = said.split()
    assert int(pid) == done.pid  # started again in place: the same process
    return tunables, int(faults)


def test_large_blocks_come_from_the_heap_once_started_with_the_settings() -> None:
    pages = 350_000 // 4096
    (tuned, tuned_faults), (untouched, untouched_faults) = _faults("tune"), _faults("leave")
    assert tuned == TUNABLES and untouched == "-"
    # Three fresh blocks per round untuned (the copy, the bytes, the text): a fault per page.
    assert untouched_faults >= 100 * pages
    assert tuned_faults < pages * 5  # the first rounds' blocks, then the same ones again


def test_the_environments_own_settings_win() -> None:
    assert allocator_environment({"MALLOC_MMAP_THRESHOLD_": "131072"}) is None
    assert allocator_environment({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=1"}) is None
    other = allocator_environment({"GLIBC_TUNABLES": "glibc.cpu.x86_shstk=off"})
    assert other is not None and other["GLIBC_TUNABLES"] == f"glibc.cpu.x86_shstk=off:{TUNABLES}"
    assert _faults("tune", MALLOC_MMAP_THRESHOLD_="131072")[0] == "-"


def test_the_image_sets_them_in_its_environment() -> None:
    dockerfile = (Path(__file__).parents[2] / "docker" / "Dockerfile").read_text()
    assert f"GLIBC_TUNABLES={TUNABLES}" in dockerfile
