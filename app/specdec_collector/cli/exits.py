"""The exit codes of every `specdec` command, in one table (docs/benchmarks.md prints it).

`specdec run` exits with its command's own code whenever the command failed: these are the
codes of `specdec`'s own outcomes. 2 is argparse's for a usage error, so every wrong option
or value says 2; the collector being out of reach has a code of its own (sysexits' 69,
EX_UNAVAILABLE), so a script can tell "try again later" from "fix the call".
"""

from enum import IntEnum

from specdec_collector.client import CollectorError
from specdec_collector.core.gates import GATE_FAILED_EXIT


class Exit(IntEnum):
    """What a `specdec` command's exit code means."""

    OK = 0
    REFUSED = 1  # the collector answered with an error (or a load's request failed)
    USAGE = 2  # a wrong option or value (argparse's own code too)
    UNREACHABLE = 69  # the collector (or the server asked for) did not answer
    GATE_FAILED = GATE_FAILED_EXIT  # `specdec run`: a --require/--max-drop gate failed


def error_text(status: int, detail: object, server: str) -> str:
    """An error answer of the collector as a sentence: a 422's list of problems one per field
    (`body.targets.0: ...`), a 404 of a path the collector does not have (Starlette's bare
    "Not Found", an empty or HTML answer of another server) as a hint that `--server` is not a
    collector's base URL."""
    if isinstance(detail, list):
        problems = []
        for item in detail:
            if isinstance(item, dict):
                where = ".".join(str(part) for part in item.get("loc", ()))
                problems.append(f"{where}: {item.get('msg', item)}" if where else str(item))
            else:
                problems.append(str(item))
        return "; ".join(problems) + f" (HTTP {status})"
    if status == 404 and _not_the_collectors(detail):
        return (
            f"{server} has no such path (HTTP 404): is --server (SPECDEC_SERVER) the collector's "
            "base URL, e.g. http://127.0.0.1:8000?"
        )
    return f"{detail} (HTTP {status})"


def failure_text(exc: Exception, server: str) -> str:
    """Why a call failed, as a sentence: `error_text` for the collector's own answers."""
    if isinstance(exc, CollectorError):
        return error_text(exc.status, exc.detail, server)
    return str(exc)


def _not_the_collectors(detail: object) -> bool:
    """Whether a 404's detail is not one of the collector's own sentences ("window w not
    found"): the router's bare "Not Found", or the empty or HTML page of another server."""
    text = str(detail).strip()
    return text in ("", "Not Found") or text.startswith("<")
