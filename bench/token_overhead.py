"""The cost per generated token around the kernels: Hearth beside llama.cpp on a model whose
arithmetic is negligible (a 2-layer, 128-wide llama), same file, same run.

    .venv/bin/python bench/token_overhead.py [--shape tiny-llama] [--threads 1]
                                             [--generate 256] [--rounds 6] [--reps 4]
                                             [--pipelined measured|on|off]

On such a model the time of a token is what each engine spends around its kernels (building
or reusing the graph, filling its inputs, the scheduler, the thread pool's wake-up, reading
the logits, choosing the token): on a GPU that is most of a token. Three loops, each in a
process of its own (bench/workers.py), rotating which goes first each round:

  engine     Hearth's ForwardEngine, one pass per token, argmax in Python
  runner     Hearth's whole runner path (batching loop, sampling, streaming events), greedy,
             speculation off (one token per pass), pipelining as `--pipelined` says (by
             default measured by the runner, runner/pipelining.py)
  llama.cpp  llama-cpp-python's low-level loop (llama_decode per token, argmax in Python):
             the engine loop's counterpart
  llama.cpp generate
             llama-cpp-python's own generation loop (`Llama.generate`, its sampler chain in C,
             greedy) with each token's text decoded: the runner's counterpart

Printed: ms per generated token, wall clock and the process's CPU time, min and median over
every measurement (`reps` per process, after a warm-up), and llama.cpp's time over Hearth's
(above 1: Hearth spends less per token), on minima and on medians (the minimum is the figure
least touched by other load). One compute thread by default: with two on a loaded 2-core
machine, ggml's spinning thread pools measure the load, not the engines; the CPU time of a
one-thread process is the work it does, whatever else runs. Any `--shape` or `--model` works;
on a real size the figure is then the whole token.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from engine_speed import run_worker  # noqa: E402
from machine import cpu_description  # noqa: E402
from shapes import add_model_arguments, model_from_args  # noqa: E402

WORKERS = {
    "engine": "ours",
    "runner": "runner",
    "llama.cpp": "llamacpp",
    "llama.cpp generate": "llamacpp_generate",
}
# Each Hearth loop beside its llama.cpp counterpart.
COUNTERPART = {"engine": "llama.cpp", "runner": "llama.cpp generate"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_arguments(ap)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--gpu", action="store_true",
        help="every layer on the first CUDA device, both engines (a CUDA build: bench/gpu)",
    )  # fmt: skip
    ap.add_argument("--prompt", type=int, default=16, help="prompt tokens before generating")
    ap.add_argument("--generate", type=int, default=256)
    ap.add_argument(
        "--pipelined", choices=["measured", "on", "off"], default="measured",
        help="the runner's pipelining: measured (its default), or always on or off",
    )  # fmt: skip
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=4, help="measurements per process")
    ap.add_argument(
        "--only", default=",".join(WORKERS), help="loops to run (comma-separated names)"
    )
    args = ap.parse_args()
    if not args.model and not args.shape:
        args.shape = "tiny-llama"
    model = model_from_args(args)
    # Token ids that every vocabulary has (byte tokens of a SentencePiece one); BOS first.
    ids = [1] + [3 + (i * 37) % 250 for i in range(args.prompt - 1)]
    req = {
        "repo": str(REPO),
        "model": model,
        "ids": ids,
        "threads": args.threads,
        "n_ctx": 2048,
        "n_batch": 512,
        "generate": args.generate,
        "reps": args.reps,
        "vary_base": 3,  # the runner's per-round first token (never from the prompt cache)
        "speculate": False,  # one token per pass: the cost of a token, not of drafting
        "pipelined": {"measured": None, "on": True, "off": False}[args.pipelined],
        "gpu": args.gpu,
    }
    names = [n for n in WORKERS if n in args.only.split(",")]
    ms: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in names}
    for r in range(args.rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:  # rotate who goes first
            for run in run_worker(WORKERS[name], req):
                n = run.get("gen_n", args.generate)
                ms[name]["wall"].append(1000 * run["gen_s"] / n)
                ms[name]["cpu"].append(1000 * run["gen_cpu_s"] / n)
    print(cpu_description())
    print(
        f"model {Path(model).name}, {'all layers on the GPU, ' if args.gpu else ''}"
        f"{args.threads} threads, {len(ids)}-token prompt then "
        f"{args.generate} greedy tokens; {args.rounds} rounds x {args.reps} measurements"
    )
    med = statistics.median
    for clock in ("wall", "cpu"):
        head = f"{'ms/token ' + clock:20}{'min':>8}{'median':>8}{'max':>8}"
        print(head + "   llama.cpp / this (min, median): counterpart; low-level loop")
        for name in names:
            v = ms[name][clock]
            line = f"{name:20}{min(v):8.3f}{med(v):8.3f}{max(v):8.3f}"
            for ref in dict.fromkeys([COUNTERPART.get(name), "llama.cpp"]):
                if ref in ms and name in COUNTERPART:
                    c = ms[ref][clock]
                    line += f"   {min(c) / min(v):.2f}x, {med(c) / med(v):.2f}x"
            print(line)


if __name__ == "__main__":
    main()
