"""Speculation on against off on one runner, in pairs: what prompt lookup gains or costs for one
stream and for four, with text that repeats and text that does not.

    .venv/bin/python bench/speculation_pairs.py [--pairs 3] [--repeat-penalty 1.0]
                                                [--tokens 128] [--threads 2] [--model FILE]

One runner (the default model unless `--model`/`--shape`, 4 slots) serves every measurement, so
what speculation learns about this machine and this model (draft_cost.py, each sequence's pace)
carries over as it does in a service; each pair measures 1 stream on and off, then 4 streams on
and off (the order of on and off alternating from pair to pair, so that a drift in speed weighs on
both alike), each from a prompt prefix of its own (no prompt cache). Printed: each pair's tokens
a second and the on/off ratios, then their medians. `--repeat-penalty 1.5` makes text that does
not repeat (prompt lookup then finds little), 1.0 the base model's greedy text, which does.
Sequential runs in separate processes (`runner_scaling.py --speculate on|off`) vary more on a
loaded machine than these pairs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import runner_scaling  # noqa: E402
from machine import cpu_description  # noqa: E402
from shapes import add_model_arguments, model_from_args  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_arguments(ap)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--repeat-penalty", type=float, default=1.0)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from hearth.runner.core import Runner, RunnerConfig

    model = model_from_args(args)
    config = RunnerConfig(model, num_ctx=2048, parallel=4, num_batch=512, threads=args.threads)
    runner = Runner(config)
    streams = runner_scaling._streams
    prompts = runner_scaling.PROMPTS
    ratios: dict[int, list[float]] = {1: [], 4: []}
    print(cpu_description())
    print(f"model {Path(model).name}, {args.threads} threads, {args.tokens} tokens a stream, "
          f"repeat penalty {args.repeat_penalty}")  # fmt: skip
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # a warm-up
            streams(runner, prompts[:1], 16, -1, True)
        for i in range(args.pairs):
            order = (True, False) if i % 2 else (False, True)
            rate: dict[tuple[int, bool], float] = {}
            with contextlib.redirect_stdout(io.StringIO()):  # (each round's own lines)
                for n in (1, 4):
                    for on in order:
                        tag = 1000 * i + 10 * n + on
                        rate[n, on] = streams(
                            runner, prompts[:n], args.tokens, tag, on, args.repeat_penalty
                        )
            line = f"pair {i}:"
            for n in (1, 4):
                ratios[n].append(rate[n, True] / rate[n, False])
                line += (f"  {n} stream(s) on {rate[n, True]:.1f} off {rate[n, False]:.1f} tok/s"
                         f" ({ratios[n][-1]:.3f})")  # fmt: skip
            print(line, flush=True)
    finally:
        runner.close()
    med = statistics.median
    print(f"median on/off: 1 stream {med(ratios[1]):.3f}, 4 streams {med(ratios[4]):.3f}")


if __name__ == "__main__":
    main()
