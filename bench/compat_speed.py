"""The llama.cpp compatibility runner against bare llama-cpp-python, same model, same run.

    .venv/bin/python bench/compat_speed.py [--model PATH | --shape NAME] [--threads 2]
                                           [--tokens 64] [--rounds 7] [--quick]

The compat runner (`hearth runner --engine llamacpp`) is driven over its HTTP protocol, as the
service drives it (hearth.server.scheduling.runner_process); llama.cpp's side runs in its own
process through llama-cpp-python's low-level API (llama_batch + llama_decode, greedy argmax
in numpy, as the runner does). Default model: Gemma 3 270M (hearth.default_model).

1. One stream: prompt speed (tokens/s over the evaluation of a prompt of about 480 tokens in
   one batch, as llama-bench's pp512) and generation speed after it (tokens after the first
   over the time from the first to the last, the same count on both sides); ratios compat /
   bare (the target is >= 0.95: the protocol and Hearth's sampler cost little).
2. Four streams at once: aggregate generation speed over one stream's, for the compat runner
   (4 concurrent requests on 4 slots) and for llama.cpp's own batching (one llama_batch with
   4 sequence ids per step); the compat runner should scale at least as well.
Each figure is the median over `--rounds`; every round uses new prompts (no cache reuse).
`--quick`: one round, 8 tokens, to check that it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from machine import cpu_description  # noqa: E402
from prompts import LONG_PROMPT  # noqa: E402
from shapes import add_model_arguments, model_from_args  # noqa: E402

from hearth.runner.protocol import (  # noqa: E402
    CompletionDone,
    CompletionOptions,
    CompletionRequest,
    EngineKind,
    RunnerOptions,
    to_wire,
)
from hearth.server.scheduling.runner_process import RunnerProcess  # noqa: E402

PROMPT = (
    "Round {r}, stream {s}. The history of the printing press begins in the fifteenth century, "
    "when metal movable type, oil-based inks and a screw press came together in one workshop. "
    "Describe in detail how the invention spread across Europe and what it changed:"
)
# llama.cpp's side, in a process of its own (never beside another libggml).
_BARE = r"""
import ctypes, json, sys, time
import numpy as np
import llama_cpp as L
req = json.loads(sys.argv[1])
L.llama_backend_init()
mp = L.llama_model_default_params(); mp.n_gpu_layers = 0
model = L.llama_model_load_from_file(req["model"].encode(), mp)
cp = L.llama_context_default_params()
cp.n_ctx = req["n_ctx"] * 4; cp.n_batch = cp.n_ubatch = 512; cp.n_seq_max = 4
cp.kv_unified = False; cp.n_threads = cp.n_threads_batch = req["threads"]; cp.no_perf = True
# as the runner (flash attention only when asked for: same kernels on both sides)
cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
ctx = L.llama_init_from_model(model, cp)
vocab = L.llama_model_get_vocab(model); n_vocab = L.llama_vocab_n_tokens(vocab)
batch = L.llama_batch_init(512, 0, 1)
def tok(text):
    b = text.encode(); out = (ctypes.c_int32 * (len(b) + 8))()
    n = L.llama_tokenize(vocab, b, len(b), out, len(b) + 8, True, True); return list(out[:n])
def decode(rows):  # rows: (token, pos, seq, want_logits)
    for i, (t, p, s, o) in enumerate(rows):
        batch.token[i] = t; batch.pos[i] = p; batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = s; batch.logits[i] = o
    batch.n_tokens = len(rows)
    assert L.llama_decode(ctx, batch) == 0
def argmax(i):
    return int(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).argmax())
def run(prompts, n):
    mem = L.llama_get_memory(ctx); L.llama_memory_clear(mem, True)
    ids = [tok(p) for p in prompts]
    t0 = time.perf_counter()
    rows, last = [], []
    for s, p in enumerate(ids):
        rows += [(t, i, s, int(i == len(p) - 1)) for i, t in enumerate(p)]
        last.append(len(rows) - 1)
    decode(rows)
    nxt = [argmax(i) for i in last]
    t1 = time.perf_counter()
    pos = [len(p) for p in ids]
    for _ in range(n - 1):
        decode([(nxt[s], pos[s], s, 1) for s in range(len(ids))])
        nxt = [argmax(i) for i in range(len(ids))]
        pos = [q + 1 for q in pos]
    t2 = time.perf_counter()
    return {"prompt_tokens": sum(map(len, ids)), "prompt_s": t1 - t0,
            "gen_tokens": len(ids) * (n - 1), "gen_s": t2 - t1}
print(json.dumps({"one": run(req["one"], req["n"]), "four": run(req["four"], req["n"])}))
"""


async def _complete(runner: RunnerProcess, prompt: str, n: int) -> dict[str, Any]:
    # Greedy and no penalties: the same work as the bare side's argmax.
    options = CompletionOptions(temperature=0, num_predict=n, repeat_penalty=1)
    req = CompletionRequest(prompt=prompt, options=options)
    done: dict[str, Any] = {}
    async for line in runner.completion(req):
        if isinstance(line, CompletionDone):
            done = to_wire(line)
    return done


async def _compat_round(runner: RunnerProcess, r: int, n: int) -> dict[str, float]:
    one = await _complete(runner, LONG_PROMPT.format(r=r), n)
    t0 = time.perf_counter()
    four = await asyncio.gather(
        *(_complete(runner, PROMPT.format(r=r, s=s + 1), n) for s in range(4))
    )
    wall = time.perf_counter() - t0
    gen = sum(d["eval_count"] - 1 for d in four)  # as the bare side: tokens after the first
    prompt_s = max(d["prompt_eval_duration"] for d in four) / 1e9
    return {
        "prompt_tps": one["prompt_eval_count"] / (one["prompt_eval_duration"] / 1e9),
        # eval_duration runs from the first token's sampling to the last's: eval_count - 1
        # decodes, as the bare side's n - 1.
        "gen_tps": (one["eval_count"] - 1) / (one["eval_duration"] / 1e9),
        "four_gen_tps": gen / max(1e-9, wall - prompt_s),
        "eval_count": min(d["eval_count"] for d in [one, *four]),
    }


def _bare_round(model: str, threads: int, r: int, n: int) -> dict[str, float]:
    req = {
        "model": model,
        "threads": threads,
        "n_ctx": 1024,
        "n": n,
        "one": [LONG_PROMPT.format(r=r)],
        "four": [PROMPT.format(r=r, s=s + 1) for s in range(4)],
    }
    proc = subprocess.run(
        [sys.executable, "-c", _BARE, json.dumps(req)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"llama-cpp-python failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    one, four = out["one"], out["four"]
    return {
        "prompt_tps": one["prompt_tokens"] / one["prompt_s"],
        "gen_tps": one["gen_tokens"] / one["gen_s"],
        "four_gen_tps": four["gen_tokens"] / four["gen_s"],
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(ap)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="one round of 8 tokens")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.tokens = 1, 8
    model = model_from_args(args)
    print(f"model {Path(model).name}, {args.threads} threads, {cpu_description()}")
    options = RunnerOptions(
        num_ctx=1024, parallel=4, threads=args.threads, engine=EngineKind.LLAMACPP
    )
    runner = await RunnerProcess.start(model, options)
    compat, bare = [], []
    try:
        for r in range(args.rounds):
            c = await _compat_round(runner, r, args.tokens)
            # The same number of new tokens on both sides (a stream may end at end of turn).
            n = int(c["eval_count"]) or args.tokens
            compat.append(c)
            bare.append(_bare_round(model, args.threads, r, n))
    finally:
        await runner.stop()

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(x[key] for x in rows)

    print(f"{'':28}{'compat':>10}{'bare':>10}{'ratio':>8}")
    for key, label in (
        ("prompt_tps", "prompt tok/s (~500 tokens)"),
        ("gen_tps", "gen tok/s (1 stream)"),
    ):
        c, b = med(compat, key), med(bare, key)
        print(f"{label:28}{c:10.1f}{b:10.1f}{c / b:8.2f}")
    c4, b4 = med(compat, "four_gen_tps"), med(bare, "four_gen_tps")
    print(f"{'gen tok/s (4 streams)':28}{c4:10.1f}{b4:10.1f}{c4 / b4:8.2f}")
    sc, sb = c4 / med(compat, "gen_tps"), b4 / med(bare, "gen_tps")
    print(f"4-stream scaling: compat {sc:.2f}x, llama.cpp batching {sb:.2f}x (ratio {sc / sb:.2f})")


if __name__ == "__main__":
    asyncio.run(main())
