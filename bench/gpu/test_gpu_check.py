"""bench/gpu, checked on a machine with no GPU so that the GPU check cannot rot between the
rare sessions that are lent one: the CUDA build configures, the staged files travel within the
device tool's 64 MiB a call, and the check itself runs end to end on the CPU (--dry-run).

Not part of the product suite (it downloads wheels from PyPI and takes minutes): run it with
scripts/test-gpu-check.sh (.ci/run does, as a step of its own). Everything it stages goes to a
temporary folder (GPU_STAGE), never into the checkout's .gpu/."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPU = REPO / "bench" / "gpu"
CALL_LIMIT = 64 << 20  # what one device call may carry, the working tree included


def _toolkit() -> str | None:
    for d in (os.environ.get("CUDA_HOME"), "/usr/local/cuda", "/opt/cuda"):
        if (
            d
            and (Path(d) / "bin" / "nvcc").exists()
            and (Path(d) / "include" / "cuda_runtime.h").exists()
        ):
            return d
    return None


def _tree_bytes() -> int:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return sum(
        (REPO / f).stat().st_size
        for f in files.stdout.decode().split("\0")
        if f and (REPO / f).is_file()
    )


@pytest.mark.slow
@pytest.mark.skipif(_toolkit() is None, reason="no CUDA toolkit (nvcc) on this machine")
def test_cuda_build_configures_for_one_architecture(tmp_path: Path) -> None:
    r = subprocess.run(
        ["bash", str(GPU / "build-cuda.sh"), "--configure-only", "90-real"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHON": str(REPO / ".venv" / "bin" / "python"),
             "GPU_STAGE": str(tmp_path)},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "CMAKE_CUDA_ARCHITECTURES=90-real" in r.stderr
    assert "configures for sm 90-real" in r.stderr


@pytest.mark.skipif(_toolkit() is not None, reason="a toolkit is installed at a default place")
def test_cuda_build_refuses_without_a_toolkit(tmp_path: Path) -> None:
    """No toolkit: one sentence and exit 2, not a half-made build."""
    path = f"{tmp_path}:/usr/bin:/bin"
    r = subprocess.run(
        ["bash", str(GPU / "build-cuda.sh"), "--configure-only"],
        cwd=REPO, capture_output=True, text=True,
        env={"PATH": path, "HOME": str(tmp_path), "CUDA_HOME": str(tmp_path / "none"),
             "GPU_STAGE": str(tmp_path / "stage")},
    )  # fmt: skip
    assert r.returncode == 2 and "no CUDA toolkit found" in r.stderr


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bench/gpu/stage.sh run for real: wheels from PyPI, the tiny vision model, model pieces
    (in a temporary folder)."""
    stage = tmp_path_factory.mktemp("gpu-stage")
    r = subprocess.run(["bash", str(GPU / "stage.sh")], cwd=REPO, capture_output=True, text=True,
                       timeout=1200, env={**os.environ, "GPU_STAGE": str(stage)})  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return stage


@pytest.mark.slow
def test_staged_files_travel_within_the_call_limit(staged: Path) -> None:
    # every dependency the GPU image lacks has a wheel for its Python 3.12
    wheels = [p.name for p in (staged / "wheels").glob("*.whl")]
    sys.path.insert(0, str(GPU))
    from wheel_list import needed

    need = [pin.split("==")[0] for pin in needed()]
    assert {"fastapi", "pydantic", "uvicorn", "gguf", "opentelemetry-api"} <= set(need)
    for name in need:
        stem = name.replace("-", "_").lower()
        match = [w for w in wheels if w.lower().startswith(stem + "-")]
        assert match, f"no wheel for {name}"
        assert all(re.search(r"-(cp312|abi3|py3|py2\.py3)-", w) for w in match), match
    # the check's call: tree + wheels + CUDA wheels + vision model, under 64 MiB; the CUDA
    # wheels' sizes are those build-cuda.sh recorded when they are not built here
    cuda = sum(p.stat().st_size for p in (staged / "cuda").glob("*.whl"))
    if not cuda:
        recorded = json.loads((GPU / "cuda-build.json").read_text())
        cuda = sum(w["bytes"] for w in recorded["wheels"])
    carried = sum(p.stat().st_size for d in ("wheels", "vision") for p in (staged / d).iterdir())
    total = _tree_bytes() + carried + cuda
    assert total < CALL_LIMIT, f"the check's call would carry {total >> 20} MiB"
    # each piece of the default model goes in a call of its own, and they join to the model
    pieces = sorted(staged.glob("model-*/part"), key=lambda p: int(p.parent.name.split("-")[1]))
    assert len(pieces) >= 4
    assert all(_tree_bytes() + p.stat().st_size < CALL_LIMIT for p in pieces)
    vision = staged / "vision"
    assert (vision / "ollama.gguf").stat().st_size > 0 and (vision / "image.png").stat().st_size > 0


@pytest.mark.slow
def test_check_runs_end_to_end_on_the_cpu(staged: Path, tmp_path: Path) -> None:
    """The whole check with no GPU: the default model joined from its pieces, parity and speed
    on the CPU only, llama.cpp beside it, the too-large model refused with its numbers, the
    vision model answering; the GPU-only figures say why they are absent."""
    r = subprocess.run(
        ["bash", str(GPU / "check.sh"), "--dry-run"], cwd=REPO, capture_output=True, text=True,
        timeout=900, env={**os.environ, "OUT": str(tmp_path), "GPU_STAGE": str(staged)},
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["errors"] == {}
    assert report["model"] == "hearth-default-model.gguf"  # joined from the pieces
    assert report["card"] is None and report["memory"] == {"skipped": "no GPU"}
    cpu = report["parity"]["runs"]["cpu"]
    assert cpu["layout"] == "CPU only"
    assert all(o["tokens"] and len(o["logprobs"]) == len(o["tokens"]) for o in cpu["outputs"])
    assert cpu["batch_invariance"]["summary"]
    speed = report["speed"]
    assert speed["cpu"]["prompt_tokens"] > 400 and speed["cpu"]["gen_tok_s"] > 0
    assert speed["llamacpp"]["cpu"]["gen_tok_s"] > 0
    assert "cpu_over_llamacpp_gen_tok_s" in speed["ratios"]
    refused = report["refusal"]["refused"]
    assert refused["status"] == 507 and "too large" in refused["message"]
    assert "GiB" in refused["message"]
    assert report["refusal"]["then_served"]
    vision = report["vision"]
    assert vision["answers"]["cpu"]["answer"] and vision["same_answer"]
    assert (tmp_path / "check.log").read_text().count("done, status 0") == 1
