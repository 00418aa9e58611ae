"""The README and docs/: short for users, true to the tree, and without history (git has it)."""

import re
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
