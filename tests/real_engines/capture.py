"""Write the payloads of `tests/fixtures/engines/` from the real engines (see its README).

    python -m tests.real_engines.capture [vllm|llamacpp ...]

Each engine is started fresh on loopback; `before` is read once it serves, `after` after a few
completions (temperature 0, a passage held twice so n-gram drafts are accepted), `restart`
after it was killed, started again and given one completion, `nospec` from the same engine
started without drafting after one completion. Each payload is written byte for byte as the
engine answered the collector's `Accept`.
"""

import sys
import tempfile
from pathlib import Path

from specdec_collector.sources.scrape import ACCEPT
from tests.real_engines import provision, servers
from tests.support import clients
from tests.support.metrics_server import free_port

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"
PASSAGE = (
    "Speculative decoding drafts several tokens cheaply and lets the large model verify them "
    "in one step. When the draft is right, many tokens come out of one forward pass. "
)


def _payload(engine: servers.Engine) -> bytes:
    answer = clients.get(f"{engine.base}/metrics", headers={"Accept": ACCEPT}, timeout=10)
    answer.raise_for_status()
    return answer.content


def _complete(engine: servers.Engine, requests: int) -> None:
    for i in range(requests):
        text = f"Text {i}. {PASSAGE}{PASSAGE}Speculative decoding drafts"
        if engine.name == "vllm":
            body = {"model": servers.MODEL, "prompt": text, "max_tokens": 48, "temperature": 0}
            path = "/v1/completions"
        else:
            body = {"prompt": text, "n_predict": 48, "temperature": 0}
            path = "/completion"
        clients.post(f"{engine.base}{path}", json=body, timeout=300).raise_for_status()


def capture(name: str, logs: Path) -> None:
    start = servers.start_vllm if name == "vllm" else servers.start_llama
    stem = {"vllm": f"vllm_{provision.VLLM_VERSION}_cpu_ngram_k4", "llamacpp": "llamacpp_ngram"}[
        name
    ]
    port = free_port()
    engine = start(port, logs / f"{name}.log")
    try:
        (FIXTURES / f"{stem}_before.txt").write_bytes(_payload(engine))
        _complete(engine, 3)
        (FIXTURES / f"{stem}_after.txt").write_bytes(_payload(engine))
        engine.kill()
        engine = start(port, logs / f"{name}.log")
        _complete(engine, 1)
        (FIXTURES / f"{stem}_restart.txt").write_bytes(_payload(engine))
    finally:
        engine.stop()
    plain = start(free_port(), logs / f"{name}-nospec.log", spec=False)
    try:
        _complete(plain, 1)
        (FIXTURES / f"{stem}_nospec.txt").write_bytes(_payload(plain))
    finally:
        plain.stop()


def main(names: list[str]) -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="specdec-capture-"))
    for name in names or ["llamacpp", "vllm"]:
        capture(name, logs)
        print("captured", name, "logs in", logs)


if __name__ == "__main__":
    main(sys.argv[1:])
