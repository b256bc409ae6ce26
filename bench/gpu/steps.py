"""check.py's steps for issue 33 beside the first GPU check's: speed at real models' shapes,
the tiny model's cost per token, correctness teacher-forced against llama.cpp CUDA, and the
service surviving a runner's abort. Each takes the running `Check` and returns its part of the
report (targets.py reads them).

The shapes and the per-token cost are other benchmarks' work, called by name rather than
repeated: `bench/shapes.py` (`SHAPES`, `build(shape)`: random weights at a real model's shapes,
quantized to Q4_K_M by llama.cpp, cached) and `bench/token_overhead.py` (its printed table).
Where either is absent the step says so in the report (and, on a GPU, the target is missed as
not measured).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parents[1]
DEFAULT_SHAPES = "llama3.2-1b,llama3.2-3b,llama3.1-8b"
TEACHER_TEXT = (
    "The old lighthouse stood at the edge of the cliff, and every night its keeper climbed the "
    "spiral stairs to light the lamp. Ships passing in the dark relied on its steady beam. "
)


def _shapes_module() -> tuple[Any, str]:
    """bench/shapes.py, or None with the reason (another helper writes it)."""
    try:
        import shapes  # bench/ is on the path (check.py)
    except ImportError as e:
        return None, f"bench/shapes.py cannot be imported ({e}); it writes the shapes' files"
    if not hasattr(shapes, "SHAPES") or not hasattr(shapes, "build"):
        return None, "bench/shapes.py has no SHAPES / build(shape): not the expected helper"
    return shapes, ""


def shapes_speed(check: Any) -> dict[str, Any]:
    """Per shape: prompt and generation on the GPU, all layers and about half, against
    llama.cpp CUDA on the same file (the speed step's measurement, GPU configs only)."""
    names = [n for n in (check.args.shapes or "").split(",") if n]
    if not names:
        return {}
    shapes, why = _shapes_module()
    if shapes is None:
        return {name: {"skipped": why} for name in names}
    out: dict[str, Any] = {}
    for name in names:
        if name not in shapes.SHAPES:
            out[name] = {"skipped": f"unknown shape (bench/shapes.py has {sorted(shapes.SHAPES)})"}
            continue
        started = time.monotonic()
        path = Path(shapes.build(shapes.SHAPES[name]))
        model = f"shape-{name}"
        check.create(model, path)
        layers = check.layer_count(model)
        configs = {k: v for k, v in check.configs(layers).items() if k != "cpu" or not check.gpu}
        out[name] = check.speed_of(model, path, configs, layers)
        out[name]["written_s"] = round(time.monotonic() - started, 1)
        check.api("DELETE", "/api/delete", {"model": model})
    return out


def overhead(check: Any) -> dict[str, Any]:
    """bench/token_overhead.py on the tiny llama: ms per generated token of Hearth's engine
    and runner loops and their llama.cpp counterparts (its table's min / median / max), on
    the CPU and, with a GPU, with every layer on it (both engines)."""
    script = BENCH / "token_overhead.py"
    if not script.is_file():
        return {"skipped": "bench/token_overhead.py is absent (the per-token cost benchmark)"}
    rounds = "1" if check.args.dry_run else "4"
    cmd = [sys.executable, str(script), "--shape", "tiny-llama", "--rounds", rounds,
           "--reps", "2", "--generate", "64" if check.args.dry_run else "256"]  # fmt: skip
    out: dict[str, Any] = {}
    for where, extra in [("cpu", []), *([("gpu", ["--gpu"])] if check.gpu else [])]:
        run = subprocess.run(cmd + extra, capture_output=True, text=True, timeout=900)
        if run.returncode:
            raise RuntimeError(f"token_overhead.py {where} failed: {run.stderr[-1500:]}")
        rows = parse_overhead(run.stdout)
        part: dict[str, Any] = {"ms_per_token": rows, "output": run.stdout[-2000:]}
        for ours, theirs in [("engine", "llama.cpp"), ("runner", "llama.cpp generate")]:
            if ours in rows and theirs in rows:
                for stat in ("median", "min"):
                    part[f"{theirs}_over_{ours}_{stat}"] = rows[theirs][stat] / rows[ours][stat]
        out[where] = part
    return out


def parse_overhead(text: str) -> dict[str, dict[str, float]]:
    """token_overhead.py's table (its first, wall-clock one): `name min median max [...]`
    lines, in ms."""
    rows: dict[str, dict[str, float]] = {}
    number = r"(\d+(?:\.\d+)?)"
    names = r"engine|runner|llama\.cpp generate|llama\.cpp"
    for line in text.splitlines():
        m = re.match(rf"^({names})\s+{number}\s+{number}\s+{number}", line)
        if m and m.group(1) not in rows:
            rows[m.group(1)] = {"min": float(m.group(2)), "median": float(m.group(3)),
                                "max": float(m.group(4))}  # fmt: skip
    return rows


def _teacher(engine: str, req: dict[str, Any]) -> list[float]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(req, f)
    try:
        run = subprocess.run([sys.executable, str(Path(__file__).with_name("teacher.py")), engine,
                              f.name], capture_output=True, text=True, timeout=900)  # fmt: skip
    finally:
        Path(f.name).unlink()
    if run.returncode:
        raise RuntimeError(f"teacher.py {engine} failed: {run.stderr[-1500:]}")
    return list(json.loads(run.stdout.strip().splitlines()[-1])["logprobs"])


def _spread(a: list[float], b: list[float]) -> dict[str, float]:
    d = sorted(abs(x - y) for x, y in zip(a, b, strict=True))
    return {"max": d[-1], "p99": d[int(0.99 * (len(d) - 1))], "mean": sum(d) / len(d)}


def correctness(check: Any) -> dict[str, Any]:
    """Teacher-forced logprobs of the same tokens: Hearth on the GPU (all layers) against
    llama.cpp CUDA (all layers), and llama.cpp's own CPU-vs-CUDA spread; Hearth's CPU beside."""
    from prompts import llamacpp_tokens

    ids = llamacpp_tokens(check.args.model, TEACHER_TEXT * (2 if check.args.dry_run else 8))
    base = {"model": check.args.model, "ids": ids, "layers": check.layers}
    out: dict[str, Any] = {"tokens": len(ids)}
    hearth_cpu = _teacher("hearth", {**base, "gpu_layers": 0})
    llama_cpu = _teacher("llamacpp", {**base, "gpu_layers": 0})
    out["hearth_cpu_vs_llamacpp_cpu"] = _spread(hearth_cpu, llama_cpu)
    if check.gpu is None:
        out["skipped"] = "no GPU: the CPU spread only"
        return out
    code = "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 3)"
    if subprocess.run([sys.executable, "-c", code], capture_output=True).returncode != 0:
        out["skipped"] = "llama-cpp-python is not a CUDA build: no llama.cpp CUDA to compare"
        return out
    full = {**base, "gpu_layers": check.layers}
    hearth_gpu = _teacher("hearth", full)
    llama_gpu = _teacher("llamacpp", full)
    out["llamacpp_cpu_vs_cuda"] = _spread(llama_cpu, llama_gpu)
    out["hearth_gpu_vs_llamacpp_cuda"] = _spread(hearth_gpu, llama_gpu)
    out["hearth_gpu_vs_hearth_cpu"] = _spread(hearth_gpu, hearth_cpu)
    out["llamacpp_cpu_vs_cuda_max"] = out["llamacpp_cpu_vs_cuda"]["max"]
    out["hearth_gpu_vs_llamacpp_cuda_max"] = out["hearth_gpu_vs_llamacpp_cuda"]["max"]
    return out


def abort(check: Any) -> dict[str, Any]:
    """A runner killed with SIGABRT while it streams an answer: the request must end with a
    sentence (an error line, not a dropped connection) and the service keep serving."""
    options = {"num_gpu": check.layers} if check.gpu is not None else {"num_gpu": 0}
    check.unload_all()
    check.generate("check", "Hello", {**options, "num_predict": 1})  # loaded
    pid = check.loaded("check")["hearth"].get("pid")
    if pid is None:
        return {"survived": False, "problem": "/api/ps gives no runner pid"}
    body = {
        "model": "check",
        "prompt": "Count from one to one thousand:",
        "raw": True,
        "stream": True,
        "options": {**options, "temperature": 0, "num_predict": 4000},
    }
    lines: list[str] = []
    problem = ""

    def stream() -> None:
        nonlocal problem
        try:
            with check.client.stream("POST", check.url + "/api/generate", json=body) as r:
                for line in r.iter_lines():
                    lines.append(line)
        except httpx.HTTPError as e:
            problem = f"the stream broke instead of ending with a sentence ({e})"

    reader = threading.Thread(target=stream)
    reader.start()
    deadline = time.monotonic() + 60
    while len(lines) < 3 and reader.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(pid, signal.SIGABRT)
    reader.join(60)
    last = lines[-1] if lines else ""
    sentence = ""
    try:
        sentence = json.loads(last).get("error", "") if last else ""
    except json.JSONDecodeError:
        problem = problem or f"the last line is not JSON: {last[:200]}"
    try:
        after = check.generate("check", "The capital of France is", {**options, "num_predict": 4})
        survived = bool(after.get("response") is not None)
    except Exception as e:
        survived, problem = False, problem or f"the service did not answer afterwards: {e}"
    if not sentence and not problem:
        problem = f"the aborted request ended without an error sentence: {last[:200]}"
    return {"chunks_before": len(lines) - 1, "sentence": sentence, "survived": survived,
            "service_alive": check.proc.poll() is None, "problem": problem}  # fmt: skip
