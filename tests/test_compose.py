"""The compose stack, checked without a Docker engine: files it names exist, commands parse."""

import os
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from specdec_collector.cli import build_parser
from specdec_collector.config import cores_allowed

ROOT = Path(__file__).parent.parent


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def test_every_referenced_file_exists() -> None:
    for name, service in _compose()["services"].items():
        build = service.get("build")
        if build:
            assert (ROOT / build["context"] / build["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), (name, source)


def test_prometheus_scrapes_the_collector_and_grafana_is_provisioned() -> None:
    services = _compose()["services"]
    prometheus = yaml.safe_load((ROOT / "docker" / "prometheus.yml").read_text())
    scraped = {
        t
        for job in prometheus["scrape_configs"]
        for c in job["static_configs"]
        for t in c["targets"]
    }
    assert "collector:8000" in scraped  # its own /metrics (default path)
    assert "prometheus" in services and "grafana" in services
    datasource = yaml.safe_load(
        (ROOT / "docker/grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"


def test_every_command_is_a_valid_specdec_invocation() -> None:
    commands = [s["command"] for s in _compose()["services"].values() if "command" in s]
    specdec = [command for command in commands if command[0] == "specdec"]
    assert len(specdec) >= 4
    for command in specdec:
        build_parser().parse_args(command[1:])  # exits (fails the test) on a bad invocation


def test_replicas_profile_shares_one_postgres_with_distinct_replica_ids() -> None:
    services = _compose()["services"]
    replicas = [
        s for s in services.values() if "replicas" in s.get("profiles", []) and s.get("build")
    ]
    assert len(replicas) == 2
    urls = {r["environment"]["SPECDEC_DATABASE_URL"] for r in replicas}
    assert len(urls) == 1 and next(iter(urls)).startswith("postgresql+psycopg://")
    assert len({r["environment"]["SPECDEC_REPLICA_ID"] for r in replicas}) == 2
    nginx = (ROOT / "docker" / "nginx.conf").read_text()
    assert "collector-1:8000" in nginx and "collector-2:8000" in nginx


def test_dockerfile_runs_as_a_user_with_a_healthcheck() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "USER specdec" in dockerfile
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
    assert 'CMD ["specdec", "serve", "--host", "0.0.0.0", "--port", "8000"]' in dockerfile


def test_what_the_dockerfile_copies_is_enough_to_build_the_package(tmp_path: Path) -> None:
    """The image runs `pip install .` on what its COPY lines bring: built here from those alone
    (no Docker engine on this machine), the wheel builds and holds the package."""
    import shutil
    import subprocess
    import sys

    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    context = tmp_path / "image"
    context.mkdir()
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            *sources, _ = line.split()[1:]
            for source in sources:
                origin = ROOT / source
                # `COPY a/b ./` puts b in the work dir, as Docker does.
                if origin.is_dir():
                    shutil.copytree(
                        origin, context / origin.name, ignore=shutil.ignore_patterns("__pycache__")
                    )
                else:
                    shutil.copy(origin, context / origin.name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path / "wheel"), str(context)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    assert list((tmp_path / "wheel").glob("specdec_collector-*.whl"))


def test_the_build_context_leaves_out_what_the_image_does_not_need() -> None:
    """`.dockerignore`: the venv, the engines, git and the data stay out of the context (it
    was 134 MB with `.venv`); nothing the Dockerfile copies is left out."""
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".engines", ".git", "data", "tests"} <= ignored
    assert "docker" not in ignored  # the lock file is in it
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    copied = {
        source for line in dockerfile.splitlines() if line.startswith("COPY ")
        for source in line.split()[1:-1]
    }  # fmt: skip
    assert copied == {
        "docker/requirements.lock", "pyproject.toml", "README.md", "LICENSE", "app", "migrations"
    }  # fmt: skip
    assert not copied & ignored


def test_the_dependencies_are_a_layer_of_their_own() -> None:
    """The image installs the dependencies from the lock file alone, before anything else is
    copied: a change to the code (or to pyproject.toml) reuses that layer."""
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    lines = dockerfile.splitlines()
    copies = [i for i, line in enumerate(lines) if line.startswith("COPY ")]
    deps = next(i for i, line in enumerate(lines) if "pip install -r" in line)
    assert lines[copies[0]] == "COPY docker/requirements.lock ./"
    assert lines[deps] == "RUN pip install -r requirements.lock"
    assert copies[0] < deps < copies[1]
    assert "pip install --no-deps ." in dockerfile


def _pins() -> dict[str, str]:
    lines = (ROOT / "docker" / "requirements.lock").read_text().splitlines()
    pins = dict(line.split("==") for line in lines if line and not line.startswith("#"))
    assert all(name == canonicalize_name(name) for name in pins), "names as make lock writes them"
    return pins


def test_the_lock_pins_every_dependency_within_what_pyproject_allows() -> None:
    """Every dependency of pyproject.toml (and each one's own, as installed) is pinned, each
    to one version that its specifier allows: what `make lock` wrote is still true."""
    pins = _pins()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(text) for text in project["dependencies"]]
    for requirement in wanted:
        wanted_name = canonicalize_name(requirement.name)
        assert wanted_name in pins, f"{wanted_name} is not in docker/requirements.lock: make lock"
        pinned = pins[wanted_name]
        assert requirement.specifier.contains(pinned, prereleases=True), (wanted_name, pinned)
    # The closure: every installed dependency of a pinned package is pinned too.
    for name in pins:
        for text in metadata.requires(name) or []:
            needed = Requirement(text)
            if needed.marker is None or needed.marker.evaluate({"extra": ""}):
                assert canonicalize_name(needed.name) in pins, (name, needed.name)


def test_the_suite_runs_the_locked_versions() -> None:
    """`make` installs the service's dependencies under the lock (`-c`): the versions the
    tests run with are the image's."""
    differ = {
        name: (pinned, metadata.version(name))
        for name, pinned in _pins().items()
        if metadata.version(name) != pinned
    }
    assert differ == {}, f"installed versions differ from docker/requirements.lock: {differ}"


@pytest.mark.parametrize(
    ("affinity", "cpu_max", "cfs", "cores"),
    [
        (32, "max 100000\n", None, 32),  # no quota: every core it may run on
        (32, "150000 100000\n", None, 2),  # 1.5 CPUs: 2 workers, not 32
        (2, "400000 100000\n", None, 2),  # a quota above the affinity
        (8, None, ("-1\n", "100000\n"), 8),  # cgroup v1 without a quota
        (8, None, ("50000\n", "100000\n"), 1),  # half a CPU: one worker
        (4, "not a quota", None, 4),
    ],
)
def test_workers_default_to_the_containers_cpu_quota(
    affinity: int, cpu_max: str | None, cfs: tuple[str, str] | None, cores: int
) -> None:
    assert cores_allowed(affinity, cpu_max, cfs) == cores


def test_every_option_says_what_it_is_and_no_help_shows_a_key() -> None:
    """Every option and argument of every subcommand has a help text; defaults are shown, but
    never `--api-key`'s (it is the key in the environment)."""
    import argparse

    import specdec_collector.cli as cli

    def parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
        found = [parser]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    found += parsers(sub)
        return found

    every = parsers(cli.build_parser())
    silent = [
        (parser.prog, action.dest)
        for parser in every
        for action in parser._actions
        if not action.help and not isinstance(action, argparse._SubParsersAction)
    ]
    assert silent == []
    key = "sdk_the-key-in-the-environment-000"
    os.environ["SPECDEC_API_KEY"] = key
    try:
        texts = [parser.format_help() for parser in parsers(cli.build_parser())]
    finally:
        del os.environ["SPECDEC_API_KEY"]
    assert all(key not in text for text in texts)
    (ls_help,) = [t for p, t in zip(every, texts, strict=True) if p.prog == "specdec ls"]
    assert "(default: 50)" in ls_help


def test_the_compose_file_is_valid_against_the_compose_spec() -> None:
    """The compose specification's own schema (vendored in check-jsonschema): a misspelt key
    or a wrong type, which `docker compose` would refuse, fails here without a Docker engine."""
    import subprocess
    import sys

    checked = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
         str(ROOT / "docker-compose.yml")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
