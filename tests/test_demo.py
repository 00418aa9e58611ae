"""`make demo`: a newcomer's first minutes, as the README tells them."""

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.mark.slow
def test_make_demo_measures_the_simulator_and_prints_the_report() -> None:
    run = subprocess.run(
        ["make", "-s", "demo"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    assert "========== Speculative Decoding Metrics  [127.0.0.1:9100] ==========" in output
    # It says what it does from its first second: starting, waiting, loading.
    assert run.stdout.startswith("== starting a simulated vLLM server on :9100")
    assert re.search(r"^specdec wait-ready: ready after \d+\.\d s$", run.stderr, re.MULTILINE)
    assert re.search(r"^specdec load: 400 requests answered in ", run.stderr, re.MULTILINE)
    written = re.search(r"specdec: wrote (\S+)", output)
    assert written is not None, output[-3000:]
    result = json.loads(Path(written.group(1)).read_text())
    assert result["status"] == "ok"
    assert result["samples"]["taken"] >= 1
    drafts = re.search(r"^Drafts\s+(\d+)$", output, re.MULTILINE)
    assert drafts is not None and int(drafts.group(1)) == result["data"]["num_drafts"]
