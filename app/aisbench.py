"""AISBench conventions: model configs, result file names, and where results go.

An AISBench model config is a Python file of `dict(...)` literals, e.g.

    models = [dict(attr="service", type=VLLMCustomAPIChat, abbr="vllm-api",
                   host_ip="10.0.0.1", host_port=8080, max_out_len=512)]

`targets_from_config` reads `host_ip`/`host_port` from it with `ast`, never executing it.
"""

import ast
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """The model config names no target, or one that is not a literal."""


def _literal_pairs(node: ast.AST) -> dict[str, ast.AST] | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        return {kw.arg: kw.value for kw in node.keywords if kw.arg is not None}
    if isinstance(node, ast.Dict):
        return {
            key.value: value
            for key, value in zip(node.keys, node.values, strict=True)
            if isinstance(key, ast.Constant) and isinstance(key.value, str)
        }
    return None


def targets_from_config(source: str, filename: str = "<config>") -> list[dict[str, Any]]:
    """Every `{"host_ip", "host_port"}` the config's `dict(...)`/`{...}` literals name, in order."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise ConfigError(f"{filename}: not Python: {exc.msg} (line {exc.lineno})") from None
    targets: list[dict[str, Any]] = []
    for node in ast.walk(tree):
        pairs = _literal_pairs(node)
        if pairs is None or "host_ip" not in pairs or "host_port" not in pairs:
            continue
        try:
            host_ip = ast.literal_eval(pairs["host_ip"])
            host_port = ast.literal_eval(pairs["host_port"])
        except ValueError:
            line = getattr(node, "lineno", "?")
            raise ConfigError(
                f"{filename}, line {line}: host_ip and host_port must be literals"
            ) from None
        target = {"host_ip": host_ip, "host_port": host_port}
        if target not in targets:
            targets.append(target)
    if not targets:
        raise ConfigError(f"{filename}: no dict with host_ip and host_port")
    return targets


def result_filename(target_key: str) -> str:
    """`spec_decode_<host>_<port>.json` for a `host:port` key (an IPv6 host loses its brackets)."""
    host, _, port = target_key.rpartition(":")
    host = host.strip("[]").replace(":", "_")
    return f"spec_decode_{host}_{port}.json"


def newest_output_dir(root: Path, since: float) -> Path | None:
    """The newest `outputs/**/performances` folder under `root` made at or after `since`.

    That is where AISBench writes a run's performance results.
    """
    found = [
        path
        for path in (root / "outputs").glob("**/performances")
        if path.is_dir() and path.stat().st_mtime >= since
    ]
    return max(found, key=lambda path: path.stat().st_mtime) if found else None
