"""AISBench conventions: model configs read without running them, file names, output folders."""

import os
import time
from pathlib import Path

import pytest

from app.aisbench import ConfigError, newest_output_dir, result_filename, targets_from_config

CONFIG = """
from ais_bench.benchmark.models import VLLMCustomAPIChat  # never imported: the file is not run

models = [
    dict(
        attr="service",
        type=VLLMCustomAPIChat,
        abbr="vllm-api-stream-chat",
        path="",
        model="",
        request_rate=0,
        host_ip="10.0.0.1",
        host_port=8080,
        max_out_len=512,
        batch_size=1,
    ),
    dict(attr="service", type=VLLMCustomAPIChat, abbr="second", host_ip="10.0.0.2", host_port=8081),
    {"abbr": "literal", "host_ip": "10.0.0.3", "host_port": "8082"},
]
os.system("echo this would run if the file were executed")
"""


def test_targets_come_from_the_literals_without_running_the_file() -> None:
    assert targets_from_config(CONFIG) == [
        {"host_ip": "10.0.0.1", "host_port": 8080},
        {"host_ip": "10.0.0.2", "host_port": 8081},
        {"host_ip": "10.0.0.3", "host_port": "8082"},
    ]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "models = [dict(host_ip=HOST, host_port=80)]",
            "line 1: host_ip and host_port must be literals",
        ),
        ("models = [dict(abbr='x')]", "no dict with host_ip and host_port"),
        ("models = [dict(", "not Python"),
    ],
)
def test_bad_configs(source: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        targets_from_config(source, filename="cfg.py")


def test_result_file_names() -> None:
    assert result_filename("10.0.0.1:8080") == "spec_decode_10.0.0.1_8080.json"
    assert result_filename("[::1]:8000") == "spec_decode___1_8000.json"
    assert result_filename("vllm-0.svc:9000") == "spec_decode_vllm-0.svc_9000.json"


def test_newest_output_dir_made_by_the_run(tmp_path: Path) -> None:
    old = tmp_path / "outputs" / "default" / "20260101_000000" / "performances"
    old.mkdir(parents=True)
    os.utime(old, (1, 1))
    # File times come from a coarse clock and can trail time.time() by a tick: a margin.
    since = time.time() - 1
    assert newest_output_dir(tmp_path, since) is None
    new = tmp_path / "outputs" / "default" / "20261130_111111" / "performances"
    new.mkdir(parents=True)
    assert newest_output_dir(tmp_path, since) == new
