"""Inputs that became 500s: a lone surrogate in a label, and targets that grow past their
column once normalised; on both databases each is a 422 naming the field."""

from collections.abc import Iterator

import httpx
import pytest

from tests.support import clients
from tests.support.collector import serve_collector


@pytest.fixture
def api(database_url: str) -> Iterator[httpx.Client]:
    with serve_collector(database_url) as collector:
        yield clients.client(base_url=collector, timeout=30)


def _start(api: httpx.Client, body: str) -> httpx.Response:
    return api.post("/windows/w/start", content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(
    "labels", ['{"\\udc00": "x"}', '{"run": "a\\udc00b"}', '{"\\ud800\\ud800": "x"}']
)
def test_a_lone_surrogate_in_a_label_is_a_422(api: httpx.Client, labels: str) -> None:
    answer = _start(api, '{"targets": ["127.0.0.1:9"], "labels": ' + labels + "}")
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"][:2] == ["body", "labels"]


def test_a_target_that_grows_past_its_column_once_normalised_is_a_422(api: httpx.Client) -> None:
    # 2048 characters as given; `127.1` becomes `127.0.0.1` and the port is added.
    path = "/" + "a" * (2048 - len("http://127.1/"))
    grown = _start(api, '{"targets": ["http://127.1' + path + '"]}')
    zone = _start(api, '{"targets": ["[fe80::1%' + "z" * 290 + ']:8000"]}')
    for answer in (grown, zone):
        assert answer.status_code == 422, answer.text
        (detail,) = answer.json()["detail"]
        assert detail["loc"] == ["body", "targets", 0]
