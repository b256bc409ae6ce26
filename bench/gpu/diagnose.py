"""One forward pass of a small model with every layer on a GPU, compared with the CPU: the
first thing to run when the check's GPU runs fail (`check.sh --diagnose`). Each case runs in a
subprocess, so a native abort is a reported failure with its stderr, not the end of the run.

    python bench/gpu/diagnose.py OUT_DIR            all cases
    python bench/gpu/diagnose.py --case NAME        one case, in this process

Cases: tiny llama (untied output) and tiny gemma3 (output tied to the token embedding, which
stays on the CPU), fully offloaded, a prompt pass of 32 tokens and three single-token passes;
the same with only the blocks on the GPU (the output layer on the CPU); the synthetic
Gemma-3-270M-shaped model (synthetic.py) the same way at the runner's sizes (num_ctx 4096,
num_batch 512); and that model through an in-process runner (batching loop, sampling),
pipelined (batch N+1 built while N computes) and not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

CASES = ["llama-all", "gemma3-all", "gemma3-blocks", "synthetic-all", "runner-serial",
         "runner-pipelined", "runner-serial-nographs"]  # fmt: skip


def _model(name: str, folder: Path) -> tuple[Path, int]:
    from tiny_models import tiny_llama, write_tiny_gemma3, write_tiny_llama

    if name.startswith(("synthetic", "runner")):
        sys.path.insert(0, str(REPO / "bench" / "gpu"))
        from synthetic import gemma3_270m_shape

        from hearth.plugins.testing import write_tiny_model

        path = folder / "synthetic.gguf"
        if not path.exists():
            write_tiny_model(path, gemma3_270m_shape())
        return path, 18
    if name.startswith("llama"):
        return write_tiny_llama(folder / "llama.gguf", tiny_llama(layers=4)), 4
    return write_tiny_gemma3(folder / "gemma3.gguf", layers=6), 6


def _logits(path: Path, placement: object, num_ctx: int = 128, num_batch: int = 32) -> np.ndarray:
    from hearth.engine.forward import ForwardEngine
    from hearth.engine.input import PassInput
    from hearth.plugins.registry import load_installed_model as load_model

    loaded = load_model(path, num_threads=2, placement=placement)
    engine = ForwardEngine(loaded, num_ctx=num_ctx, num_batch=num_batch)
    try:
        ids = np.random.default_rng(3).integers(3, 200, 32)
        rows = [engine.forward(PassInput(ids, np.arange(32), np.zeros(32, int), np.array([31])))]
        for step, t in enumerate([5, 9, 11]):
            pos = np.array([32 + step])
            rows.append(engine.forward(PassInput(np.array([t]), pos, np.array([0]), np.array([0]))))
            print(f"pass {step + 2} done", file=sys.stderr, flush=True)
        return np.concatenate(rows)
    finally:
        engine.close()
        loaded.close()


def _runner_text(path: Path, layout: str | None, pipelined: bool) -> str:
    from hearth.runner.core import Runner, RunnerConfig
    from hearth.runner.protocol import CompletionChunk, CompletionOptions, CompletionRequest

    runner = Runner(RunnerConfig(str(path), layout=layout, pipelined=pipelined))
    try:
        text = ""
        for prompt in ("The capital of France is", "Once upon a time"):
            options = CompletionOptions(temperature=0, num_predict=16)
            seq = runner.completion(CompletionRequest(prompt=prompt, options=options))
            while (event := seq.events.get()) is not None:
                text += event.content if isinstance(event, CompletionChunk) else ""
                print(f"event {type(event).__name__}", file=sys.stderr, flush=True)
        return text
    finally:
        runner.close()


def run_case(name: str, folder: Path) -> dict[str, object]:
    from hearth.engine.ml.devices import ggml_devices
    from hearth.engine.ml.placement import DevicePlacement

    path, layers = _model(name, folder)
    gpu = next(d.id for d in ggml_devices() if d.kind == "GPU")
    on_gpu = tuple(range(layers + 1)) if not name.endswith("-blocks") else tuple(range(layers))
    if name.startswith("runner"):
        layout = json.dumps({"gpus": [{"device": gpu, "layers": list(on_gpu)}], "projector": None})
        pipelined = "pipelined" in name
        cpu_text = _runner_text(path, None, pipelined)
        gpu_text = _runner_text(path, layout, pipelined)
        return {"same_text": cpu_text == gpu_text, "cpu": cpu_text[:80], "gpu": gpu_text[:80]}
    sizes = (4096, 512) if name.startswith("synthetic") else (128, 32)
    cpu = _logits(path, None, *sizes)
    placed = _logits(path, DevicePlacement({gpu: on_gpu}), *sizes)
    diff = float(np.abs(cpu - placed).max())
    same = bool((cpu.argmax(-1) == placed.argmax(-1)).all())
    return {"max_abs_diff": diff, "max_abs_logit": float(np.abs(cpu).max()), "same_argmax": same}


def main() -> None:
    if sys.argv[1] == "--case":
        folder = Path(sys.argv[3])
        print(json.dumps(run_case(sys.argv[2], folder)))
        return
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    wanted = os.environ.get("DIAGNOSE_CASES")
    for name in wanted.split(",") if wanted else CASES:
        folder = Path("/tmp/hearth-diagnose-models")
        folder.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if name.endswith("-nographs"):  # ggml-cuda's switch: no CUDA graph capture
            env["GGML_CUDA_DISABLE_GRAPHS"] = "1"
        r = subprocess.run(
            [sys.executable, __file__, "--case", name, str(folder)],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
        results[name] = {
            "status": r.returncode,
            "result": json.loads(last) if r.returncode == 0 and last else None,
            "stderr_tail": r.stderr[-3000:],
        }
        print(name, json.dumps(results[name])[:2000], flush=True)
    (out / "diagnose.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
