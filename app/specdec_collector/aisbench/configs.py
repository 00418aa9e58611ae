"""AISBench model configs: where `ais_bench --models NAME` finds them, and which servers they name.

A model config is Python that AISBench executes (mmengine's `Config.fromfile`), e.g.

    models = [dict(attr="service", type=VLLMCustomAPIChat, abbr="vllm-api",
                   host_ip="10.0.0.1", host_port=8080, max_out_len=512)]

`read_config` evaluates it the same way, in a process of its own with a time bound
(`aisbench.evaluate`); where that fails (a `_base_` it cannot follow, an error), it falls
back to the literals of the file's last `models = [...]` assignment and says so.
"""

import ast
import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from specdec_collector.aisbench.evaluate import DEFAULT_HOST_IP, DEFAULT_HOST_PORT

EVALUATION_TIMEOUT_S = 10.0


class ConfigError(ValueError):
    """A model config cannot be found, or names no server."""


@dataclass(frozen=True, slots=True)
class ModelServer:
    """One entry of `models`: the server AISBench sends its requests to."""

    abbr: str | None
    host_ip: str
    host_port: int | str
    url: str | None = None

    def target(self) -> str | dict[str, Any]:
        """The collector's target: the server of `url` when set (AISBench sends its requests
        there and ignores host_ip/host_port), else host_ip/host_port."""
        if self.url:
            parts = urlsplit(self.url if "://" in self.url else f"http://{self.url}")
            return f"{parts.scheme}://{parts.netloc}/metrics"
        return {"host_ip": self.host_ip, "host_port": self.host_port}


@dataclass(frozen=True, slots=True)
class ConfigRead:
    """The servers a config names; `note` says if it could only be read as literals, and why."""

    path: Path
    servers: list[ModelServer]
    note: str | None = None


EVALUATE = "specdec_collector.aisbench.evaluate"


def _servers(entries: list[dict[str, Any]], where: str) -> list[ModelServer]:
    servers = []
    for entry in entries:
        host_ip, host_port = entry.get("host_ip"), entry.get("host_port")
        if not isinstance(host_ip, str) or not isinstance(host_port, int | str):
            raise ConfigError(f"{where}: a model's host_ip/host_port is not a string/number")
        servers.append(ModelServer(entry.get("abbr"), host_ip, host_port, entry.get("url")))
    if not servers:
        raise ConfigError(f"{where}: `models` names no model")
    return servers


def _evaluated(path: Path, timeout_s: float) -> list[dict[str, Any]]:
    """The server fields of `models`, from the config run as AISBench runs it."""
    try:
        run = subprocess.run(
            # -I: the config's folder never shadows a module (an `app/` beside it, say).
            [sys.executable, "-I", "-m", EVALUATE, str(path.resolve())],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=path.parent,
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(f"evaluating it took over {timeout_s:g} s") from None
    if run.returncode != 0:
        raise ConfigError(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "failed")
    entries: list[dict[str, Any]] = json.loads(run.stdout)
    return entries


def _models_assignment(tree: ast.Module) -> ast.AST | None:
    """The value of the last top-level `models = ...` (a later one overrides an earlier one)."""
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "models" for target in node.targets
        ):
            found = node.value
    return found


def _literal_entry(node: ast.AST) -> dict[str, Any] | None:
    pairs: dict[str, ast.AST]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        pairs = {kw.arg: kw.value for kw in node.keywords if kw.arg is not None}
    elif isinstance(node, ast.Dict):
        pairs = {
            key.value: value
            for key, value in zip(node.keys, node.values, strict=True)
            if isinstance(key, ast.Constant) and isinstance(key.value, str)
        }
    else:
        return None
    entry: dict[str, Any] = {"host_ip": DEFAULT_HOST_IP, "host_port": DEFAULT_HOST_PORT}
    for name in ("abbr", "host_ip", "host_port", "url"):
        if name in pairs:
            try:
                entry[name] = ast.literal_eval(pairs[name])
            except ValueError:
                line = getattr(node, "lineno", "?")
                raise ConfigError(f"line {line}: {name} is not a literal") from None
    return entry


def literal_models(source: str, filename: str = "<config>") -> list[ModelServer]:
    """The servers of the file's last top-level `models = [...]`, read as literals only."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise ConfigError(f"{filename}: not Python: {exc.msg} (line {exc.lineno})") from None
    value = _models_assignment(tree)
    if not isinstance(value, ast.List | ast.Tuple):
        raise ConfigError(f"{filename}: no `models = [...]` list")
    entries = [entry for node in value.elts if (entry := _literal_entry(node)) is not None]
    return _servers(entries, filename)


def read_config(path: Path, timeout_s: float = EVALUATION_TIMEOUT_S) -> ConfigRead:
    """The servers `path`'s `models` names, evaluated as AISBench does, else from literals."""
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    try:
        return ConfigRead(path, _servers(_evaluated(path, timeout_s), str(path)))
    except (ConfigError, ValueError) as exc:
        reason = str(exc)
    servers = literal_models(source, str(path))
    return ConfigRead(path, servers, f"could not be evaluated ({reason}); read as literals")


def installed_models_dir() -> Path | None:
    """`configs/models` of the installed AISBench package, found without importing it."""
    try:
        spec = importlib.util.find_spec("ais_bench")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        folder = Path(location) / "benchmark" / "configs" / "models"
        if folder.is_dir():
            return folder
    return None


def find_config(name: str, config_dir: Path, cwd: Path) -> Path:
    """The file `ais_bench --models NAME` uses: NAME itself if it is a file; else `NAME.py`
    under `config_dir`/models, then under the installed package's configs/models, searched
    recursively and case-insensitively (first in path order). Never the current folder."""
    given = cwd / name
    if given.is_file():
        return given
    wanted = f"{name}.py".lower()
    folders = [config_dir / "models", installed_models_dir()]
    for folder in folders:
        if folder is None or not folder.is_dir():
            continue
        matches = sorted(path for path in folder.rglob("*.py") if path.name.lower() == wanted)
        if matches:
            return matches[0]
    searched = ", ".join(str(folder) for folder in folders if folder is not None)
    raise ConfigError(f"model config {name!r} not found (searched {searched})")


@dataclass(frozen=True, slots=True)
class ConfigTargets:
    """The targets model configs name, what was read to find them, and what went wrong."""

    targets: list[str | dict[str, Any]]
    said: list[str]  # one line per config: which file, and how it was read
    problem: str | None = None  # why nothing can be measured


def targets_of_configs(paths: list[Path]) -> ConfigTargets:
    """The servers of every config in `paths`, each once, in order."""
    targets: list[str | dict[str, Any]] = []
    said: list[str] = []
    for path in paths:
        try:
            read = read_config(path)
        except ConfigError as exc:
            return ConfigTargets([], said, str(exc))
        how = f" ({read.note})" if read.note else ""
        said.append(f"model config {path}{how}: {len(read.servers)} model(s)")
        for server in read.servers:
            target = server.target()
            if target not in targets:
                targets.append(target)
    return ConfigTargets(targets, said)


def targets_of_models(names: tuple[str, ...], config_dir: Path, cwd: Path) -> ConfigTargets:
    """The servers of `ais_bench --models NAMES`, found as AISBench finds them."""
    if not names:
        return ConfigTargets([], [], "the AISBench command names no --models")
    try:
        paths = [find_config(name, config_dir, cwd) for name in names]
    except ConfigError as exc:
        return ConfigTargets([], [], str(exc))
    return targets_of_configs(paths)
