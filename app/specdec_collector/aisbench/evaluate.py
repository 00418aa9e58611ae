"""A model config evaluated as AISBench evaluates it, in a process of its own.

`python -m specdec_collector.aisbench.evaluate FILE`.

AISBench's configs are Python, executed by mmengine's `Config.fromfile`: module variables,
comprehensions and later assignments all take effect. This runs the file the same way, in a
process of its own (the caller bounds its time), and prints the `models` entries' fields that
name a server, as JSON: `[{"abbr", "host_ip", "host_port", "url"}, ...]`.

AISBench itself is usually not installed where `specdec run` runs: a module that cannot be
imported is replaced by a stand-in whose every attribute is a stand-in class (so
`from ais_bench.benchmark.models import VLLMCustomAPIChat` and `type=VLLMCustomAPIChat` work).
Real modules are always imported first. Exits 1 with the reason on stderr if the file fails.
"""

import importlib.abc
import importlib.machinery
import json
import runpy
import sys
import types
from collections.abc import Sequence
from typing import Any

#: What AISBench uses when a model entry leaves them out.
DEFAULT_HOST_IP = "localhost"
DEFAULT_HOST_PORT = 8080


class _StandIn:
    """Any class or object of a module that is not installed: callable, a context manager."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> "_StandIn":
        return _StandIn()

    def __enter__(self) -> "_StandIn":
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (_StandIn,), {})


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on `sys.meta_path`: found only where no real module is."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec:
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _plain(value: Any) -> str | int | None:
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def server_fields(models: Any) -> list[dict[str, Any]]:
    """The fields of each entry of `models` that name its server, with AISBench's defaults."""
    if not isinstance(models, list | tuple):
        raise ValueError("`models` is not a list")
    entries = []
    for entry in models:
        if not isinstance(entry, dict):
            continue
        entries.append(
            {
                "abbr": _plain(entry.get("abbr")),
                "host_ip": _plain(entry.get("host_ip", DEFAULT_HOST_IP)),
                "host_port": _plain(entry.get("host_port", DEFAULT_HOST_PORT)),
                "url": _plain(entry.get("url")) or None,
            }
        )
    return entries


def main(path: str) -> int:
    sys.meta_path.append(_StandInFinder())
    try:
        namespace = runpy.run_path(path, run_name="__config__")
        print(json.dumps(server_fields(namespace.get("models"))))
    except BaseException as exc:  # the config's own fault, whatever it is: say which
        print(f"{type(exc).__name__}: {exc}"[:300], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
