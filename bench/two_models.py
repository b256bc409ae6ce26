"""Two models answering at once, against each alone (issue 33, item 4).

    .venv/bin/python bench/two_models.py [--model PATH] [--second PATH] [--rounds 3]
        [--tokens 64] [--threads N] [--out FILE.json]

Two runners are started the way the service starts them (`RunnerProcess.start`: one process
each, default threads, the service's environment), both CPU-only. Per round: runner A alone,
runner B alone, then both at once (the same prompt shapes, fresh text per round so the prompt
cache cannot help): prompt and generation tokens per second of each, from the runners' own
timings. That is done twice in one sitting: with turns on the CPU (what the service does:
`HEARTH_CPU_SHARE`, engine/cpu_turns.py) and without (`HEARTH_CPU_SHARE=off`: the runners'
thread pools compete, as before). The figure is together / alone per runner; with turns two
runners on the same cores should each keep about half their speed (the sum about one runner's),
without them each falls far below that. Each runner's speed is bimodal between processes on
some machines: every round's raw figures are in the JSON, beside the medians.

`--second` defaults to the same file: two runners of one file compete for the cores exactly
as two different models do (their memory is separate).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from machine import cpu_description  # noqa: E402

from hearth.default_model import default_model_path  # noqa: E402
from hearth.engine.cpu import compute_threads  # noqa: E402
from hearth.runner.protocol import (  # noqa: E402
    CompletionDone,
    CompletionOptions,
    CompletionRequest,
)
from hearth.server.scheduling.runner_process import RunnerOptions, RunnerProcess  # noqa: E402

TOPICS = ["a lighthouse keeper", "the history of bread", "a trip to the mountains", "rivers"]


def _prompt(round_no: int, who: int, words: int) -> str:
    """A prompt of about `words` words, distinct per round and runner (no cache hits)."""
    topic = TOPICS[(round_no + who) % len(TOPICS)]
    filler = " ".join(f"w{round_no}x{who}y{i}" for i in range(words))
    return f"Round {round_no}, runner {who}. Notes: {filler}. Now write about {topic}:"


async def _ask(runner: RunnerProcess, prompt: str, tokens: int) -> dict[str, float]:
    options = CompletionOptions(temperature=0, num_predict=tokens, speculate=False)
    done: CompletionDone | None = None
    async for item in runner.completion(CompletionRequest(prompt=prompt, options=options)):
        if isinstance(item, CompletionDone):
            done = item
    assert done is not None
    return {
        "prompt_tokens": done.prompt_eval_count,
        "prompt_tps": done.prompt_eval_count / max(done.prompt_eval_duration, 1) * 1e9,
        "gen_tokens": done.eval_count,
        "gen_tps": done.eval_count / max(done.eval_duration, 1) * 1e9,
    }


_STARTED: list[int] = []  # runner pids, killed if this process is told to stop


def _stop_runners(signum: int, _frame: object) -> None:
    for pid in _STARTED:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    raise SystemExit(128 + signum)


async def _mode(args: argparse.Namespace, turns: bool) -> dict[str, Any]:
    """Rounds of A alone, B alone, both at once, with turns on or off."""
    if turns:
        os.environ.pop("HEARTH_CPU_SHARE", None)  # the service's default: its lock file
    else:
        os.environ["HEARTH_CPU_SHARE"] = "off"
    options = RunnerOptions(num_ctx=2048, threads=args.threads)
    runners = [
        await RunnerProcess.start(args.model, options),
        await RunnerProcess.start(args.second or args.model, options),
    ]
    _STARTED.extend(run.pid for run in runners)
    rounds: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            prompts = [_prompt(r, who, args.prompt_words) for who in (0, 1)]
            pairs = list(zip(runners, prompts, strict=True))
            alone = [await _ask(run, p, args.tokens) for run, p in pairs]
            prompts = [_prompt(r + 1000, who, args.prompt_words) for who in (0, 1)]
            together = await asyncio.gather(
                *(_ask(run, p, args.tokens) for run, p in zip(runners, prompts, strict=True))
            )
            rounds.append({"alone": alone, "together": list(together)})
            print(f"  round {r}: {_line(rounds[-1])}", flush=True)
    finally:
        for run in runners:
            await run.stop()
    return {"rounds": rounds, "medians": _medians(rounds)}


def _line(row: dict[str, Any]) -> str:
    parts = []
    for who in (0, 1):
        a, t = row["alone"][who], row["together"][who]
        parts.append(
            f"{'AB'[who]} gen {a['gen_tps']:.1f} -> {t['gen_tps']:.1f} tok/s, "
            f"prompt {a['prompt_tps']:.0f} -> {t['prompt_tps']:.0f} tok/s"
        )
    return "; ".join(parts)


def _medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for who in (0, 1):
        for kind in ("gen_tps", "prompt_tps"):
            alone = statistics.median(r["alone"][who][kind] for r in rounds)
            together = statistics.median(r["together"][who][kind] for r in rounds)
            out[f"{'AB'[who]}_{kind}"] = {
                "alone": round(alone, 2),
                "together": round(together, 2),
                "ratio": round(together / alone, 3) if alone else None,
            }
    return out


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "machine": cpu_description(),
        "model": str(args.model),
        "second": str(args.second or args.model),
        "threads": args.threads or compute_threads(),
        "tokens": args.tokens,
        "prompt_words": args.prompt_words,
    }
    for name in args.modes.split(","):
        print(f"{name}:", flush=True)
        report[name] = await _mode(args, name == "turns")
    return report


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="first model (default: the default model)")
    p.add_argument("--second", default=None, help="second model (default: the first file)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=64, help="tokens generated per request")
    p.add_argument("--prompt-words", type=int, default=150)
    p.add_argument("--threads", type=int, default=None, help="per runner (default: the runner's)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--modes", default="turns,no_turns", help="which, in this order")
    args = p.parse_args()
    args.model = args.model or str(default_model_path())
    signal.signal(signal.SIGTERM, _stop_runners)
    report = asyncio.run(_main(args))
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps({k: report[k]["medians"] for k in args.modes.split(",")}, indent=1))


if __name__ == "__main__":
    main()
