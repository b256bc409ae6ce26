"""The targets issue 33 sets, read from check.py's report: which were met, which were missed
and why (a sentence each), so the check exits non-zero naming every one it missed.

Targets (each only where its measurement applies: a GPU, a CUDA build of llama.cpp):

* speed: Hearth / llama.cpp CUDA >= SPEED (0.9) for prompt and generation, all layers on the
  GPU ("full") and about half ("half"), on the default model and each `--shapes` shape; and on
  the CPU with every core (the GPU machine's 16: item 4's prompt target, generation beside it);
* overhead: the tiny model's time per generated token no larger than llama.cpp's (item 2),
  medians: Hearth's engine loop against llama.cpp's low-level loop and Hearth's runner against
  llama-cpp-python's own generation loop (llama.cpp's ms / Hearth's >= OVERHEAD, 1.0), with
  every layer on the GPU (and on the CPU: measured everywhere, enforced on a GPU run where
  the GPU part was measured);
* correctness: Hearth on the GPU against llama.cpp CUDA, teacher-forced on the same tokens:
  the largest logprob difference within llama.cpp's own CPU-vs-CUDA largest difference (item 7);
* gpu_context: the backend context a runner's process holds on the GPU (nvidia-smi's process
  memory less the runner's buffers) no larger than the constant the layout plan counts for its
  library (item 6: else a nearly full GPU is overfilled);
* abort: after a runner is killed with SIGABRT mid-stream the request gets a sentence and the
  service keeps serving (item 8).

A step that failed, or a measurement a GPU run should have and lacks, is a missed target too
("not measured: ..."). In a dry run (no GPU) nothing is enforced: the targets are listed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OVERHEAD", "SPEED", "evaluate"]

SPEED = 0.9
OVERHEAD = 1.0


def _speed(label: str, speed: dict[str, Any] | None, gpu: bool) -> tuple[list[str], list[str]]:
    """(met, missed) for one model's speed step."""
    met: list[str] = []
    missed: list[str] = []
    if not speed or "skipped" in speed:
        why = (speed or {}).get("skipped", "the speed step did not run")
        return met, [f"{label}: speed not measured ({why})"]
    ratios = speed.get("ratios") or {}
    configs = ["cpu", "full", "half"] if gpu else ["cpu"]
    if "cpu" not in speed:
        configs.remove("cpu")  # the shapes run on the GPU only
    lc = speed.get("llamacpp") or {}
    for config in configs:
        for kind in ("prompt_tok_s", "gen_tok_s"):
            name = f"{label} {config} {kind.split('_')[0]}"
            ratio = ratios.get(f"{config}_over_llamacpp_{kind}")
            if ratio is None:
                why = lc.get("skipped") or ("no CUDA build of llama.cpp" if
                                            config != "cpu" and not lc.get("cuda_build")
                                            else "no figure")  # fmt: skip
                missed.append(f"{name}: not measured ({why})")
            elif ratio >= SPEED:
                met.append(f"{name} {ratio:.2f}x llama.cpp")
            else:
                missed.append(f"{name} {ratio:.2f}x llama.cpp (target {SPEED}x)")
    return met, missed


def evaluate(report: dict[str, Any]) -> dict[str, Any]:
    """{"met": [...], "missed": [...], "enforced": bool} for a check report."""
    gpu = report.get("card") is not None and not report.get("dry_run")
    met: list[str] = []
    missed: list[str] = [f"step {name} failed: {err}" for name, err in
                         sorted((report.get("errors") or {}).items())]  # fmt: skip
    if "speed" in report:
        m, x = _speed("default model", report["speed"], gpu)
        met += m
        missed += x
    for shape, speed in (report.get("shapes") or {}).items():
        m, x = _speed(shape, speed, gpu)
        met += m
        missed += x

    m, x = _overhead(report.get("overhead"), gpu)
    met += m
    missed += x

    if gpu:
        c = report.get("correctness") or {}
        ours, theirs = c.get("hearth_gpu_vs_llamacpp_cuda_max"), c.get("llamacpp_cpu_vs_cuda_max")
        if ours is None or theirs is None:
            missed.append(f"correctness on the GPU: not measured ({c.get('skipped', 'no figure')})")
        elif ours <= theirs:
            met.append(f"correctness: spread {ours:.4f} within llama.cpp's own {theirs:.4f}")
        else:
            missed.append(
                f"correctness: Hearth GPU vs llama.cpp CUDA spread {ours:.4f} nats exceeds "
                f"llama.cpp's own CPU-vs-CUDA spread {theirs:.4f}"
            )
        ctx = report.get("gpu_context") or {}
        if ctx.get("measured") is None:
            missed.append("gpu_context: not measured (nvidia-smi lists no runner process)")
        elif ctx["measured"] <= ctx["planned"]:
            met.append(f"gpu_context {ctx['measured'] >> 20} MiB <= planned {ctx['planned'] >> 20}")
        else:
            missed.append(
                f"gpu_context: a runner's backend took {ctx['measured'] >> 20} MiB, the plan "
                f"counts {ctx['planned'] >> 20} MiB (set HEARTH_GPU_CONTEXT={ctx['measured']})"
            )
        abort = report.get("abort") or {}
        if abort.get("survived") and abort.get("sentence"):
            met.append("abort: the service kept serving and the request got a sentence")
        elif "abort" in report:
            missed.append(f"abort: {abort.get('problem', 'the service did not survive')}")
    return {"met": met, "missed": missed, "enforced": gpu}


_OVERHEAD_PAIRS = (("engine", "llama.cpp"), ("runner", "llama.cpp generate"))


def _overhead(overhead: dict[str, Any] | None, gpu: bool) -> tuple[list[str], list[str]]:
    """The per-token targets of steps.overhead's report: each loop against its llama.cpp
    counterpart, where each was measured (on a GPU run the GPU part must be)."""
    met: list[str] = []
    missed: list[str] = []
    if overhead is None:
        return met, missed
    if "skipped" in overhead:
        return met, [f"tiny-model token overhead: not measured ({overhead['skipped']})"]
    wheres = ["cpu", "gpu"] if gpu else ["cpu"]
    for where in wheres:
        part = overhead.get(where)
        for ours, theirs in _OVERHEAD_PAIRS:
            ratio = (part or {}).get(f"{theirs}_over_{ours}_median")
            label = f"tiny-model token overhead ({where}, {ours} vs {theirs})"
            if ratio is None:
                missed.append(f"{label}: not measured")
            elif ratio >= OVERHEAD:
                met.append(f"{label}: {ratio:.2f}x llama.cpp's speed")
            else:
                missed.append(f"{label}: llama.cpp {ratio:.2f}x Hearth's speed per token "
                              f"(target {OVERHEAD}x)")  # fmt: skip
    return met, missed
