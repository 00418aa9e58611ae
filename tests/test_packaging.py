"""What `pip install` puts into site-packages: one package, `specdec_collector`, complete and typed."""

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "app" / "specdec_collector"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (built,) = out.glob("specdec_collector-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_one_top_level_package(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"specdec_collector"}


def test_the_wheel_carries_every_module_and_data_file(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    expected = {
        "specdec_collector/" + str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and "migrations" not in path.parts
    } | {
        "specdec_collector/migrations/" + str(path.relative_to(ROOT / "migrations"))
        for path in (ROOT / "migrations").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert "specdec_collector/py.typed" in expected
    assert expected <= names, sorted(expected - names)


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_the_client_imports_without_the_server_stack(tmp_path: Path) -> None:
    run = _python(
        "import sys; from specdec_collector.client import CollectorClient; "
        "print(sorted(m for m in ('sqlalchemy', 'sqlmodel', 'fastapi', 'alembic') if m in sys.modules))",
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_a_users_own_app_package_does_not_hide_the_collector(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    run = _python("from specdec_collector.client import CollectorClient; import app", tmp_path)
    assert run.returncode == 0, run.stderr


def test_the_package_has_one_name_only() -> None:
    """`app/` is not a package: `app.core…` fails from the repository root, so an IDE's
    auto-import cannot load a second copy of a module whose enums and classes differ."""
    run = _python("import app.core.counters", ROOT)
    assert run.returncode != 0
    assert "No module named 'app.core'" in run.stderr
    assert not (ROOT / "app" / "__init__.py").exists()


def test_nothing_imports_the_package_through_app() -> None:
    second_name = re.compile(r"^\s*(?:from|import)\s+app\.", re.M)
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("app", "tests", "migrations")
        for path in (ROOT / folder).rglob("*.py")
        if second_name.search(path.read_text())
    ]
    assert offenders == []


def test_an_editable_install_is_a_plain_path_entry(tmp_path: Path) -> None:
    """Static tools (mypy, Pylance) follow a path entry; they cannot follow an import hook."""
    build = f"import sys, setuptools.build_meta as b; print(b.build_editable({str(tmp_path)!r}))"
    run = subprocess.run(
        [sys.executable, "-c", build], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    built = zipfile.ZipFile(tmp_path / run.stdout.strip().splitlines()[-1])
    (pth,) = [name for name in built.namelist() if name.endswith(".pth")]
    assert built.read(pth).decode().split() == [str(ROOT / "app")]
    assert not [name for name in built.namelist() if name.endswith(".py")]
