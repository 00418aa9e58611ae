"""How far a command that takes more than a second has got, on stderr.

On a terminal one line is redrawn in place (at most ten times a second); elsewhere (a log, CI,
`make demo` piped to a file) a full line every few seconds, `SPECDEC_PROGRESS_S` (default 5), so
a log shows the command is alive without a line per request. stdout stays the command's answer,
for scripts; `--quiet` turns progress off.
"""

import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

TERMINAL_EVERY_S = 0.1
LOG_EVERY_S = 5.0


def log_every_s() -> float:
    """Seconds between two progress lines outside a terminal (`SPECDEC_PROGRESS_S`)."""
    try:
        return max(0.0, float(os.environ.get("SPECDEC_PROGRESS_S", LOG_EVERY_S)))
    except ValueError:
        return LOG_EVERY_S


class Progress:
    """One command's progress line: `show` as often as convenient, `done` once at the end."""

    def __init__(
        self,
        prefix: str,
        *,
        stream: TextIO | None = None,
        quiet: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = sys.stderr if stream is None else stream
        self._prefix, self._quiet, self._clock = prefix, quiet, clock
        self._terminal = self._stream.isatty()
        self._every_s = TERMINAL_EVERY_S if self._terminal else log_every_s()
        self._began = clock()
        self._last_shown = self._began
        self._width = 0

    def seconds(self) -> float:
        """Seconds since the command began."""
        return self._clock() - self._began

    def show(self, text: str) -> None:
        """Say `text` if the last line is old enough (the first after one interval)."""
        now = self._clock()
        if self._quiet or now - self._last_shown < self._every_s:
            return
        self._last_shown = now
        self._write(text, final=False)

    def done(self, text: str) -> None:
        """The last line, always shown (unless quiet)."""
        if not self._quiet:
            self._write(text, final=True)

    def _write(self, text: str, final: bool) -> None:
        line = f"{self._prefix}: {text}"
        if self._terminal:
            padding = " " * max(0, self._width - len(line))
            self._width = 0 if final else len(line)
            self._stream.write(f"\r{line}{padding}{chr(10) if final else ''}")
        else:
            self._stream.write(line + "\n")
        self._stream.flush()
