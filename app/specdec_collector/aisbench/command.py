"""What a wrapped AISBench command line says: models, config folder, work folder, flags."""

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CONFIG_DIR = "configs"
DEFAULT_WORK_DIR = "outputs/default"


@dataclass(frozen=True, slots=True)
class AisbenchCommand:
    """The parts of an `ais_bench` command line that say what it measures and where it writes."""

    models: tuple[str, ...]
    config_dir: Path
    work_dir: Path
    spec_decode: bool
    mode: str


def _is_aisbench(command: Sequence[str]) -> int | None:
    """The index of the first AISBench argument, if `command` runs AISBench, else None."""
    if command and os.path.basename(command[0]) == "ais_bench":
        return 1
    # `python -m ais_bench ...`
    if len(command) >= 3 and command[1] == "-m" and command[2] == "ais_bench":
        return 3
    return None


def parse_aisbench(command: Sequence[str], cwd: Path) -> AisbenchCommand | None:
    """The AISBench options of `command` (relative folders from `cwd`), or None if it is not
    an AISBench command. Options this does not know are left alone, as AISBench reads them."""
    start = _is_aisbench(command)
    if start is None:
        return None
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--models", nargs="+", default=[])
    parser.add_argument("--config-dir", default=DEFAULT_CONFIG_DIR)
    parser.add_argument("-w", "--work-dir", default=DEFAULT_WORK_DIR)
    parser.add_argument("--spec-decode", action="store_true")
    parser.add_argument("-m", "--mode", default="all")
    known, _ = parser.parse_known_args(list(command[start:]))
    return AisbenchCommand(
        models=tuple(known.models),
        config_dir=cwd / known.config_dir,
        work_dir=cwd / known.work_dir,
        spec_decode=known.spec_decode,
        mode=known.mode,
    )
