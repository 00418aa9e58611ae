"""The Kubernetes manifests of the shared deployment (`docker/kubernetes/`): valid against the
Kubernetes API's own schemas, consistent with the image and the service, and their command and
settings start a real collector that answers the probes."""

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from specdec_collector.cli import build_parser
from specdec_collector.config import Settings
from tests.support import clients
from tests.support.collector import run_server, specdec_command

ROOT = Path(__file__).parent.parent
MANIFESTS = ROOT / "docker" / "kubernetes"
# The oldest Kubernetes release still in wide use, and the newest the checker knows.
VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]


def _load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((MANIFESTS / name).read_text())
    return loaded


def _resources() -> list[str]:
    return sorted(p.name for p in MANIFESTS.glob("*.yaml") if p.name != "kustomization.yaml")


def _deployment() -> dict[str, Any]:
    return _load("deployment.yaml")


def _container() -> dict[str, Any]:
    containers: list[dict[str, Any]] = _deployment()["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", _resources())
def test_every_manifest_is_valid_against_the_kubernetes_schema(name: str, version: str) -> None:
    # Strict: a misspelt or misplaced field is an error, not silently dropped by the API server.
    kubernetes_validate.validate(_load(name), version, strict=True)


def test_the_kustomization_applies_every_manifest() -> None:
    assert sorted(_load("kustomization.yaml")["resources"]) == _resources()


def test_the_selectors_find_the_pods() -> None:
    labels = _deployment()["spec"]["template"]["metadata"]["labels"]
    assert _deployment()["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert _load("service.yaml")["spec"]["selector"].items() <= labels.items()
    assert _load("poddisruptionbudget.yaml")["spec"]["selector"]["matchLabels"].items() <= (
        labels.items()
    )


def test_the_container_is_the_images_user_port_and_command() -> None:
    container = _container()
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    uid = re.search(r"--uid (\d+)", dockerfile)
    assert uid is not None
    pod = _deployment()["spec"]["template"]["spec"]["securityContext"]
    assert pod["runAsUser"] == int(uid.group(1)) and pod["runAsNonRoot"] is True
    command = container["command"]
    assert command[0] == "specdec"
    parsed = build_parser().parse_args(command[1:])
    assert parsed.port == container["ports"][0]["containerPort"]
    service_port = _load("service.yaml")["spec"]["ports"][0]
    assert service_port["targetPort"] == container["ports"][0]["name"]
    annotations = _deployment()["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(parsed.port)


def test_every_setting_named_is_a_setting_of_the_service() -> None:
    known = {f"SPECDEC_{name.upper()}" for name in Settings.model_fields}
    named = {entry["name"] for entry in _container()["env"]} | set(_load("configmap.yaml")["data"])
    assert named <= known, named - known
    # The values themselves pass the settings' own checks.
    Settings.model_validate(
        {key.removeprefix("SPECDEC_").lower(): value for key, value in _config().items()}
    )


def _config() -> dict[str, str]:
    data: dict[str, str] = _load("configmap.yaml")["data"]
    return data


def test_the_postgresql_connections_fit_its_default_limit() -> None:
    """Replicas x workers x (pool + as many in overflow + the small reads' one): within
    PostgreSQL's default max_connections (100) less its 3 reserved for superusers, with a
    rolling update's surge."""
    spec = _deployment()["spec"]
    pods = spec["replicas"] + int(spec["strategy"]["rollingUpdate"]["maxSurge"])
    workers, pool = int(_config()["SPECDEC_WORKERS"]), int(_config()["SPECDEC_DB_POOL_SIZE"])
    assert pods * workers * (2 * pool + 1) <= 100 - 3
    # The CPU limit gives each worker a core (workers default to the quota without it).
    assert int(_container()["resources"]["limits"]["cpu"]) == workers


def test_the_command_and_settings_start_a_collector_that_answers_the_probes(
    tmp_path: Path,
) -> None:
    container = _container()
    env = {
        **_config(),
        "SPECDEC_REPLICA_ID": "specdec-collector-0",
        "SPECDEC_DATABASE_URL": f"sqlite:///{tmp_path / 'k8s.db'}",
        "SPECDEC_API_KEYS": "ops:admin:probe-test-key-0123456789",
    }
    command = [*specdec_command(), *container["command"][1:]]
    probes = [container[name]["httpGet"]["path"] for name in
              ("startupProbe", "livenessProbe", "readinessProbe")]  # fmt: skip
    with run_server(command, probes[0], env=env) as url:
        for path in probes:
            assert clients.get(f"{url}{path}", timeout=10).status_code == 200, path
