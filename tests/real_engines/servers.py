"""Real engines on loopback for the real-engine tier: start one, wait until it serves, stop it.

Each engine runs as a child process in a process group of its own (vLLM starts an engine-core
child), with its output in a log file the tests read (vLLM's `SpecDecoding metrics` lines) and
show when it fails to come up. Readiness is polled, never slept for: vLLM compiles its model
with torch.compile at its first start (about 4 minutes on two cores) and starts in 1.5 to 2.5
minutes after.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.real_engines import provision
from tests.support import clients

#: The model's name as both engines serve it.
MODEL = "gemma3"
#: vLLM's n-gram drafting, four tokens a draft.
VLLM_SPEC_CONFIG = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
}
VLLM_START_S = 600.0
LLAMA_START_S = 120.0


@dataclass
class Engine:
    """One running engine: where it serves, its process and its log."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    argv: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def metrics(self) -> str:
        """The engine's own `/metrics`, as a test reads it beside the collector."""
        answer = clients.get(f"{self.base}/metrics", timeout=10)
        answer.raise_for_status()
        return answer.text

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after 30 s."""
        _stop_group(self.process, 30.0)

    def kill(self) -> None:
        """A crash: SIGKILL to the whole process group at once."""
        _stop_group(self.process, 0.0)


def _stop_group(process: subprocess.Popen[bytes], grace_s: float) -> None:
    if process.poll() is not None:
        return
    group = os.getpgid(process.pid)
    os.killpg(group, signal.SIGKILL if grace_s == 0 else signal.SIGTERM)
    try:
        process.wait(timeout=grace_s or 10)
    except subprocess.TimeoutExpired:
        os.killpg(group, signal.SIGKILL)
        process.wait(timeout=10)
    # Children (vLLM's engine core) share the group: none may keep the port.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def _wait_ready(engine: Engine, path: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if engine.process.poll() is not None:
            raise AssertionError(
                f"{engine.name} exited with {engine.process.returncode} before serving:\n"
                + engine.log_text()[-4000:]
            )
        try:
            if clients.get(f"{engine.base}{path}", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    engine.kill()
    raise AssertionError(
        f"{engine.name} did not serve {path} within {timeout_s} s:\n" + engine.log_text()[-4000:]
    )


def _launch(
    name: str, argv: Sequence[str], port: int, log: Path, env: dict[str, str] | None = None
) -> Engine:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(
            list(argv), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    return Engine(name=name, port=port, process=process, log=log, argv=list(argv))


def vllm_argv(port: int, spec: bool = True, extra: Sequence[str] = ()) -> list[str]:
    """vLLM's OpenAI server on the CPU (`vllm serve` fails in this wheel: importlib.metadata
    finds no distribution named `vllm`, so the module is run directly)."""
    argv = [
        str(provision.VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(provision.MODEL_HF), "--served-model-name", MODEL,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "2048", "--max-num-seqs", "4", "--seed", "0",
    ]  # fmt: skip
    if spec:
        argv += ["--speculative-config", json.dumps(VLLM_SPEC_CONFIG)]
        argv += ["--per-request-spec-decode-metrics", "summary"]
    return argv + list(extra)


def vllm_env() -> dict[str, str]:
    return {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "2",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


@contextmanager
def vllm(port: int, log: Path, spec: bool = True, extra: Sequence[str] = ()) -> Iterator[Engine]:
    engine = start_vllm(port, log, spec, extra)
    try:
        yield engine
    finally:
        engine.stop()


def start_vllm(port: int, log: Path, spec: bool = True, extra: Sequence[str] = ()) -> Engine:
    engine = _launch("vllm", vllm_argv(port, spec, extra), port, log, vllm_env())
    _wait_ready(engine, "/v1/models", VLLM_START_S)
    return engine


#: llama.cpp's n-gram drafting: drafts of up to 8 tokens, their length varying.
LLAMA_SPEC_ARGS = (
    "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "4",
    "--spec-ngram-simple-size-m", "8",
)  # fmt: skip


def llama_argv(port: int, spec: bool = True, metrics: bool = True) -> list[str]:
    """llama-server on two threads. `--no-repack`: these machines advertise AMX, and the AMX
    repacking path dies with SIGILL."""
    argv = [
        str(provision.LLAMA_SERVER), "-m", str(provision.MODEL_GGUF), "--alias", MODEL,
        "--host", "127.0.0.1", "--port", str(port), "-np", "2", "-t", "2", "-c", "4096",
        "--no-repack", "--seed", "0", "--no-webui",
    ]  # fmt: skip
    if metrics:
        argv.append("--metrics")
    if spec:
        argv += LLAMA_SPEC_ARGS
    return argv


def start_llama(port: int, log: Path, spec: bool = True, metrics: bool = True) -> Engine:
    engine = _launch("llama.cpp", llama_argv(port, spec, metrics), port, log)
    _wait_ready(engine, "/health", LLAMA_START_S)
    return engine


@contextmanager
def llama(port: int, log: Path, spec: bool = True, metrics: bool = True) -> Iterator[Engine]:
    engine = start_llama(port, log, spec, metrics)
    try:
        yield engine
    finally:
        engine.stop()
