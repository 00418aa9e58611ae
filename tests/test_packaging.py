"""The wheel carries every package of the project (a non-editable install, as in the image)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_every_package_is_listed_for_the_wheel() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("app", "migrations")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed, found - listed
