"""The README and docs/: short for users, true to the tree, and without history (git has it)."""

import ast
import importlib
import inspect
import re
import textwrap
from pathlib import Path

from specdec_collector.config import Settings

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "app" / "specdec_collector"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINKED = re.compile(r"\]\(((?:docs/)?[a-z-]+\.md|LICENSE)\)")


def test_the_readme_is_short_and_starts_with_the_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    first_screen = "\n".join(text.splitlines()[:30])
    for command in ("make run", "make test", "make demo"):
        assert command in first_screen


def test_every_link_between_the_docs_leads_somewhere() -> None:
    for page in [ROOT / "README.md", *DOCS]:
        for link in LINKED.findall(page.read_text()):
            assert (page.parent / link).exists(), f"{page.name} links {link}"


def test_no_page_tells_the_projects_history() -> None:
    history = re.compile(
        r"\b(?:issue|session|round) \d+|\b(?:first|second|third|fourth|fifth|sixth|seventh) "
        r"(?:session|round)|tried and not kept|\bapp\.[a-z]",
        re.IGNORECASE,
    )
    for page in [ROOT / "README.md", *DOCS]:
        found = history.findall(page.read_text())
        assert not found, f"{page.name}: {found}"


def test_the_module_map_names_every_module_and_only_those() -> None:
    mapped = set(
        re.findall(
            r"^\| `([a-z_/]+\.py)` \|", (ROOT / "docs" / "architecture.md").read_text(), re.M
        )
    )
    tree = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.relative_to(PACKAGE).parts
        and (path.name != "__init__.py" or path.parent == PACKAGE)
    }
    assert mapped == tree, (sorted(tree - mapped), sorted(mapped - tree))


def test_every_folder_of_the_package_says_its_job() -> None:
    for init in PACKAGE.rglob("__init__.py"):
        first = init.read_text().lstrip('"').splitlines()[0] if init.read_text() else ""
        assert first.strip(), f"{init.relative_to(ROOT)} has no one-line job"


def test_the_license_is_the_one_pyproject_names() -> None:
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert 'license = "Apache-2.0"' in (ROOT / "pyproject.toml").read_text()


def test_every_setting_is_in_the_deployment_settings_table() -> None:
    table = (ROOT / "docs" / "deployment.md").read_text()
    written = {name.upper() for name in Settings.model_fields if f"SPECDEC_{name.upper()}" in table}
    # The Prometheus credentials share one row: `SPECDEC_PROMETHEUS_BEARER_TOKEN` / ... / `_PASSWORD`.
    written |= {"PROMETHEUS_PASSWORD"} if "/ `_PASSWORD`" in table else set()
    assert {name.upper() for name in Settings.model_fields} == written


# The package's top-level subpackages and modules: a backquoted dotted name that starts with
# one of them (or with `specdec_collector.`) in a docstring is a reference into the package.
TOP_LEVEL = {
    "aisbench",
    "cli",
    "core",
    "service",
    "simulator",
    "sources",
    "store",
    "windows",
    "client",
    "config",
    "exceptions",
    "schemas",
    "telemetry",
    "gcpause",
}
BACKQUOTED = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")
# References the test knows to be stale, in files this change could not edit. Each must still
# be stale (the test says so once it resolves): fix the docstring, then drop its name here.
KNOWN_STALE: set[str] = set()


def _docstrings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(
            node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        ) and (text := ast.get_docstring(node, clean=False)):
            found.append((getattr(node, "lineno", 1), text))
    return found


def _set_on_self(owner: type, name: str) -> bool:
    """Whether a method of `owner` sets `self.<name>` (an instance attribute)."""
    try:
        source = textwrap.dedent(inspect.getsource(owner))
    except (OSError, TypeError):
        return False
    return any(
        isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr == name
        for node in ast.walk(ast.parse(source))
    )


def _has(owner: object, name: str) -> bool:
    """Whether `name` is an attribute of `owner`, or a field a class declares (a dataclass's,
    a pydantic model's, a protocol's or a typed dict's annotations, or one its methods set)."""
    if hasattr(owner, name):
        return True
    if not isinstance(owner, type):
        return False
    fields = getattr(owner, "model_fields", None)
    if isinstance(fields, dict) and name in fields:
        return True
    classes = [base for base in owner.__mro__ if base.__module__.startswith("specdec_collector")]
    return any(name in getattr(base, "__annotations__", {}) for base in owner.__mro__) or any(
        _set_on_self(base, name) for base in classes
    )


def _resolves(name: str) -> bool:
    """Whether `name` (relative to the package, or from `specdec_collector.`) is a module of
    the package, or an attribute chain from one."""
    parts = name.removeprefix("specdec_collector.").split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(["specdec_collector", *parts[:cut]])
        try:
            owner: object = importlib.import_module(module_name)
        except ModuleNotFoundError as missing:
            if missing.name is not None and module_name.startswith(missing.name):
                continue
            raise
        for attribute in parts[cut:]:
            if not _has(owner, attribute):
                return False
            owner = getattr(owner, attribute, None)
        return True
    return False


def _package_references() -> dict[str, list[str]]:
    """Every reference into the package written in a docstring, with where it is written."""
    references: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.relative_to(PACKAGE).parts:
            continue
        for line, text in _docstrings(path):
            for name in BACKQUOTED.findall(text):
                first = name.split(".")[0]
                if first in TOP_LEVEL or name.startswith("specdec_collector."):
                    where = f"{path.relative_to(PACKAGE)}:{line}"
                    references.setdefault(name, []).append(where)
    return references


def test_every_reference_in_a_docstring_names_what_exists() -> None:
    references = _package_references()
    assert references, "no docstring names anything of the package"
    stale = {name: where for name, where in references.items() if not _resolves(name)}
    unknown = {name: where for name, where in stale.items() if name not in KNOWN_STALE}
    assert not unknown, unknown
    fixed = KNOWN_STALE - stale.keys()
    assert not fixed, f"resolves now, drop it from KNOWN_STALE: {sorted(fixed)}"
