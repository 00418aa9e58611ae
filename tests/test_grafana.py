"""The compose stack's monitoring, for real: every query of the Grafana dashboard and every
alerting rule run by Debian's Prometheus, configured by docker/prometheus.yml itself (its
targets pointed at two real collector replicas and a real simulator), each figure checked
against one computed here from the raw samples and against the simulator's acceptance profile;
the alert logic by `promtool test rules`."""

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import clients
from tests.support.collector import run_collector, serve_simulator
from tests.support.metrics_server import free_port
from tests.support.prometheus_server import prometheus_binary, run_prometheus_config

ROOT = Path(__file__).parent.parent
DASHBOARD = ROOT / "docker" / "grafana" / "dashboards" / "specdec.json"
ALERTS = ROOT / "docker" / "alerts.yml"
PROFILE = [0.7, 0.45, 0.3]  # the simulator's acceptance per draft position
RANGE = "10s"  # Grafana's $__rate_interval at a 1 s scrape interval, about


def _promtool() -> str:
    prometheus_binary()  # skips (fails under CI) without Debian's prometheus package
    found = shutil.which("promtool")
    assert found is not None, "Debian's prometheus package ships promtool"
    return found


def test_the_alert_rules_are_valid_and_fire_as_their_unit_tests_expect() -> None:
    promtool = _promtool()
    checked = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yml"],
        cwd=ROOT / "tests" / "fixtures", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _queries() -> dict[str, str]:
    """Every panel query by panel title (and refId), Grafana's variables filled in as "All"."""
    found = {}
    for panel in _dashboard()["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in (("$__rate_interval", RANGE), ("$model", ".*"),
                                ("$server", ".*"), ("$team", ".*")):  # fmt: skip
                expr = expr.replace(name, value)
            assert "$" not in expr, expr
            found[f"{panel['title']} [{target['refId']}]"] = expr
    return found


class Prometheus:
    def __init__(self, base_url: str) -> None:
        self.http = clients.client(base_url=base_url, timeout=30)

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        answer = self.http.get("/api/v1/query", params={"query": expr, "time": at}).json()
        assert answer["status"] == "success", (expr, answer)
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result


def _compose_config(replicas: list[str], simulator: str) -> dict[str, Any]:
    """docker/prometheus.yml as it is, its compose host names replaced by this test's
    addresses, scraping every second and evaluating the rules every second."""
    text = (ROOT / "docker" / "prometheus.yml").read_text()
    for name, address in (("collector-1:8000", replicas[0]), ("collector-2:8000", replicas[1]),
                          ("collector:8000", replicas[0]), ("simulator:9000", simulator)):  # fmt: skip
        text = text.replace(f'"{name}"', f'"{address}"')
    config: dict[str, Any] = yaml.safe_load(text)
    config["global"] = {
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "evaluation_interval": "1s",
    }
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    config["rule_files"] = [str(ALERTS)]
    return config


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Prometheus, list[str], str, dict[str, Any]]]:
    database_url = f"sqlite:///{tmp_path / 'grafana.db'}"
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
    with (
        serve_simulator(
            "--acceptance", ",".join(map(str, PROFILE)), "--drafts-per-s", "2000", "--seed", "11"
        ) as simulator,  # fmt: skip
        run_collector(database_url, tmp_path / "one", SPECDEC_REPLICA_ID="collector-1") as one,
        run_collector(database_url, tmp_path / "two", SPECDEC_REPLICA_ID="collector-2") as two,
    ):
        replicas = [one.base_url.removeprefix("http://"), two.base_url.removeprefix("http://")]
        target = simulator.removeprefix("http://")
        config = _compose_config(replicas, target)
        with run_prometheus_config(config) as prometheus_url:
            api = clients.client(base_url=one.base_url, timeout=30)
            # A closed window (the bar gauges) and an open one, sampled every 0.5 s on the
            # simulator and on a port nobody listens on (scrapes and scrape errors).
            assert api.post("/windows/closed/start", json={"targets": [target]}).status_code == 201
            time.sleep(1)
            result = api.post("/windows/closed/stop").json()["targets"][0]["result"]
            dead = f"127.0.0.1:{free_port()}"
            body = {"targets": [target, dead], "sample_interval_s": 0.5}
            assert api.post("/windows/open/start", json=body).status_code == 201
            time.sleep(14)  # ranges of 10 s filled, and the rules evaluated
            try:
                yield Prometheus(prometheus_url), replicas, target, result
            finally:
                api.post("/windows/open/stop")


def _samples(
    prometheus: Prometheus, selector: str, at: float
) -> dict[tuple[tuple[str, str], ...], float]:
    """The increase of each series over RANGE before `at`, from its raw samples: last - first."""
    found = {}
    for series in prometheus.query(f"{selector}[{RANGE}]", at):
        values = [float(value) for _, value in series["values"]]
        found[tuple(sorted(series["metric"].items()))] = values[-1] - values[0]
    return found


@pytest.mark.slow
def test_every_dashboard_query_answers_from_real_scrapes_with_the_right_figures(
    stack: tuple[Prometheus, list[str], str, dict[str, Any]],
) -> None:
    prometheus, replicas, target, result = stack
    at = time.time()
    answers = {title: prometheus.query(expr, at) for title, expr in _queries().items()}
    assert all(answers.values()), [title for title, answer in answers.items() if not answer]

    # The live panels against the raw counters' increases (same scrapes, so the same
    # timestamps: rate()'s extrapolation cancels in the ratio) and against the profile.
    accepted = sum(_samples(prometheus, "vllm:spec_decode_num_accepted_tokens_total", at).values())
    drafted = sum(_samples(prometheus, "vllm:spec_decode_num_draft_tokens_total", at).values())
    drafts = sum(_samples(prometheus, "vllm:spec_decode_num_drafts_total", at).values())
    per_position: dict[str, float] = {}
    for labels, increase in _samples(
        prometheus, "vllm:spec_decode_num_accepted_tokens_per_pos_total", at
    ).items():
        position = dict(labels)["position"]
        per_position[position] = per_position.get(position, 0) + increase
    assert drafts > 5000  # enough for the profile's check below

    [rate] = answers["Acceptance rate (live) [A]"]
    assert rate["metric"]["instance"] == target
    assert float(rate["value"][1]) == pytest.approx(100 * accepted / drafted, rel=1e-3)
    assert float(rate["value"][1]) == pytest.approx(100 * sum(PROFILE) / 3, abs=2)
    [length] = answers["Acceptance length (live) [A]"]
    assert float(length["value"][1]) == pytest.approx(1 + accepted / drafts, rel=1e-3)
    assert float(length["value"][1]) == pytest.approx(1 + sum(PROFILE), abs=0.06)
    positions = {
        series["metric"]["position"]: float(series["value"][1])
        for series in answers["Acceptance by draft position (live) [A]"]
    }
    assert positions.keys() == {"0", "1", "2"}
    for position, share in positions.items():
        assert share == pytest.approx(per_position[position] / drafts, rel=1e-3)
        assert share == pytest.approx(PROFILE[int(position)], abs=0.02)

    # The collector's panels: both replicas scraped, each labelled; their shared figures kept
    # once (max by), equal to what the API answered.
    up = prometheus.query('up{job="specdec-collector"}', at)
    assert {series["metric"]["instance"] for series in up} == set(replicas)
    assert {series["metric"]["replica"]: series["value"][1] for series in up} == {
        "collector": "1", "collector-1": "1", "collector-2": "1"
    }  # fmt: skip
    [bar] = answers["Acceptance rate of recent windows (%) [A]"]
    assert bar["metric"] == {"team": "default", "window": "closed", "target": target}
    assert float(bar["value"][1]) == pytest.approx(result["data"]["acceptance_rate"], abs=1e-9)
    [bar_length] = answers["Acceptance length of recent windows [A]"]
    assert float(bar_length["value"][1]) == pytest.approx(
        result["data"]["acceptance_length"], abs=1e-9
    )
    [open_windows] = answers["Open windows [A]"]
    assert open_windows["value"][1] == "1"
    errors = answers["Scrape errors by reason [A]"]
    assert errors and all(float(series["value"][1]) > 0 for series in errors)
    [requests] = answers["Scrapes per second [B]"]  # the requests the scrapes sent
    assert float(requests["value"][1]) > 0

    # The variables' values: the simulator's model and address, the collector's team.
    model = clients.get(f"http://{target}/v1/models", timeout=10).json()["data"][0]["id"]
    labels = prometheus.http.get(
        "/api/v1/label/model_name/values", params={"match[]": "vllm:spec_decode_num_drafts_total"}
    ).json()["data"]
    assert labels == [model]
    teams = prometheus.http.get(
        "/api/v1/label/team/values", params={"match[]": "specdec_window_acceptance_rate"}
    ).json()["data"]
    assert teams == ["default"]

    # The alerting rules are loaded from docker/alerts.yml and evaluate without an error;
    # acceptance is steady and the collector keeps up, so none fires.
    groups = prometheus.http.get("/api/v1/rules").json()["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert {rule["name"] for rule in rules} == {
        "SpecDecodeAcceptanceDrop", "SpecdecSamplerBehind", "SpecdecScrapesFailing"
    }  # fmt: skip
    assert all(rule["health"] == "ok" and not rule.get("lastError") for rule in rules), rules
    assert all(
        rule["state"] == "inactive" for rule in rules if rule["name"] != "SpecdecScrapesFailing"
    )
