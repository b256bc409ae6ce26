"""bench/gpu/targets.py: the GPU check names every target it missed (issue 33, item 9), on
reports built by hand whose verdict is known, and reads token_overhead.py's table."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "bench" / "gpu"))

import steps  # noqa: E402
import targets  # noqa: E402


def speed(full: float, half: float, cpu: float = 1.0) -> dict:
    ratios = {}
    for config, r in (("cpu", cpu), ("full", full), ("half", half)):
        for kind in ("prompt_tok_s", "gen_tok_s"):
            ratios[f"{config}_over_llamacpp_{kind}"] = r
    return {"cpu": {}, "full": {}, "half": {}, "llamacpp": {"cuda_build": True}, "ratios": ratios}


def overhead(ratio: float, gpu_runner: float | None = None) -> dict:
    """steps.overhead's report: every loop at `ratio`, the GPU runner's at `gpu_runner`."""

    def part(runner: float) -> dict:
        return {"llama.cpp_over_engine_median": ratio,
                "llama.cpp generate_over_runner_median": runner}  # fmt: skip

    return {"cpu": part(ratio), "gpu": part(ratio if gpu_runner is None else gpu_runner)}


def gpu_report(**parts) -> dict:
    base = {
        "card": "NVIDIA H200",
        "dry_run": False,
        "errors": {},
        "speed": speed(1.1, 0.95),
        "overhead": overhead(1.05),
        "correctness": {"hearth_gpu_vs_llamacpp_cuda_max": 0.03, "llamacpp_cpu_vs_cuda_max": 0.04},
        "gpu_context": {"measured": 655 << 20, "planned": 660 << 20},
        "abort": {"survived": True, "sentence": "the runner stopped (signal 6)"},
    }
    return {**base, **parts}


def test_a_gpu_run_meeting_every_target_misses_none():
    verdict = targets.evaluate(gpu_report())
    assert verdict["enforced"] and verdict["missed"] == []
    assert len(verdict["met"]) == 6 + 4 + 1 + 1 + 1


def test_each_missed_target_is_named():
    report = gpu_report(
        speed=speed(0.48, 0.95, cpu=0.3),
        shapes={"llama3.1-8b": {"skipped": "bench/shapes.py cannot be imported"}},
        overhead=overhead(1.0, gpu_runner=0.5),
        correctness={"hearth_gpu_vs_llamacpp_cuda_max": 0.2, "llamacpp_cpu_vs_cuda_max": 0.04},
        gpu_context={"measured": 700 << 20, "planned": 660 << 20},
        abort={"survived": False, "sentence": "", "problem": "the service shut down"},
        errors={"vision": "RuntimeError: boom"},
    )
    missed = targets.evaluate(report)["missed"]
    assert "step vision failed: RuntimeError: boom" in missed
    assert "default model full prompt 0.48x llama.cpp (target 0.9x)" in missed
    assert "default model cpu gen 0.30x llama.cpp (target 0.9x)" in missed
    assert not any("half" in m for m in missed)  # 0.95 meets 0.9
    assert any(m.startswith("llama3.1-8b: speed not measured") for m in missed)
    slow = "tiny-model token overhead (gpu, runner vs llama.cpp generate): llama.cpp 0.50x"
    assert any(m.startswith(slow) for m in missed)
    assert sum("token overhead" in m for m in missed) == 1  # the other three meet 1.0
    spread = "correctness: Hearth GPU vs llama.cpp CUDA spread 0.2000"
    assert any(m.startswith(spread) for m in missed)
    assert any("HEARTH_GPU_CONTEXT=734003200" in m for m in missed)
    assert "abort: the service shut down" in missed


def test_a_gpu_run_without_measurements_misses_them():
    report = gpu_report(correctness={"skipped": "no CUDA build"}, gpu_context={})
    missed = targets.evaluate(report)["missed"]
    assert "correctness on the GPU: not measured (no CUDA build)" in missed
    assert any(m.startswith("gpu_context: not measured") for m in missed)


def test_a_dry_run_enforces_nothing():
    report = {"card": None, "dry_run": True, "errors": {}, "speed": speed(0, 0, cpu=0.5)}
    verdict = targets.evaluate(report)
    assert not verdict["enforced"]
    assert verdict["missed"] == ["default model cpu prompt 0.50x llama.cpp (target 0.9x)",
                                 "default model cpu gen 0.50x llama.cpp (target 0.9x)"]  # fmt: skip


def test_token_overhead_s_table_is_read():
    text = (
        "AMD EPYC 2 cores\nmodel tiny.gguf, 2 threads, ...\n"
        "ms/token         min  median     max   llama.cpp/this (min, median)\n"
        "engine         0.700   0.760   0.900   0.61x, 0.57x\n"
        "runner         0.860   0.900   1.200   0.50x, 0.48x\n"
        "llama.cpp      0.430   0.430   0.500\n"
        "llama.cpp generate 0.470 0.480 0.600\n"
        "ms/token cpu     min  median     max\n"
        "runner         0.100   0.100   0.100\n"
    )
    rows = steps.parse_overhead(text)
    assert rows["runner"] == {"min": 0.86, "median": 0.9, "max": 1.2}  # the wall-clock table's
    assert rows["llama.cpp"]["median"] == 0.43 and rows["llama.cpp generate"]["median"] == 0.48
    assert set(rows) == {"engine", "runner", "llama.cpp", "llama.cpp generate"}
