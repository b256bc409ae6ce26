"""Prompt and generation speed of our engine beside llama.cpp's, same model, same run.

    .venv/bin/python bench/engine_speed.py [--model PATH | --shape NAME] [--threads 2]
                                           [--prompt 512] [--generate 128] [--rounds 3]

Each round runs both engines one after the other (in separate processes, alternating which
goes first) on identical token ids; the figures are medians over rounds. Ratios above 1 mean
Hearth is faster. `strict` compares against llama.cpp's own compute-only timers (excluding its
Python binding's overhead), `wall` against the same wall clock both sides see.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from machine import cpu_description  # noqa: E402
from prompts import llamacpp_tokens  # noqa: E402
from shapes import add_model_arguments, model_from_args  # noqa: E402


def _token_ids(model: str, n: int) -> list[int]:
    """A natural-text prompt of exactly n tokens (BOS first), from llama.cpp's tokenizer."""
    text = " ".join(
        ["The history of the lighthouse on the northern cliffs begins in 1821, when"
         " a storm wrecked three ships and the town decided it would never happen again."] * 80
    )  # fmt: skip
    try:
        return llamacpp_tokens(model, text)[:n]
    except RuntimeError as e:
        raise SystemExit(str(e)) from None


def run_worker(worker: str, req: dict) -> list[dict]:
    """Run a bench/workers.py worker on `req` in a process of its own; its measurements."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(req, f)
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "workers.py"), worker, f.name],
        capture_output=True,
        text=True,
    )
    Path(f.name).unlink()
    if out.returncode:
        raise SystemExit(f"{worker} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["runs"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_arguments(ap)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--generate", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2, help="measurements per process")
    args = ap.parse_args()
    model = model_from_args(args)
    ids = _token_ids(model, args.prompt)
    req = {
        "repo": str(REPO),
        "model": model,
        "ids": ids,
        "threads": args.threads,
        "n_ctx": 2048,
        "n_batch": 512,
        "generate": args.generate,
        "reps": args.reps,
    }
    runs: dict[str, list[dict]] = {"ours": [], "runner": [], "llamacpp": []}
    names = list(runs)
    for r in range(args.rounds):
        for name in names[r % 3 :] + names[: r % 3]:  # rotate who goes first
            runs[name].extend(run_worker(name, req))

    def rate(samples: list[dict], key: str, n: int | None) -> float:
        return statistics.median((n or s["gen_n"]) / s[key] for s in samples)

    n_p, n_g = len(ids), args.generate
    cpp = runs["llamacpp"]
    w_p, w_g = rate(cpp, "prompt_s", n_p), rate(cpp, "gen_s", n_g)
    i_p, i_g = rate(cpp, "internal_prompt_s", n_p), rate(cpp, "internal_gen_s", n_g)
    print(cpu_description())
    print(
        f"model {Path(model).name}, {args.threads} threads, prompt {n_p} tokens, generation "
        f"{n_g} tokens, {len(cpp)} measurements each, medians; ratios are Hearth / llama.cpp"
    )
    head = ["tok/s", "llama.cpp", "(internal)", "ratio wall", "ratio strict"]
    print(f"{'':24}{head[0]:>8}{head[1]:>11}{head[2]:>12}{head[3]:>12}{head[4]:>14}")
    for label, name in (("engine passes", "ours"), ("runner (loop+sampling)", "runner")):
        ours = runs[name]
        gen_n = None if name == "runner" else n_g
        o_p, o_g = rate(ours, "prompt_s", n_p), rate(ours, "gen_s", gen_n)
        for what, o, w, i in (("prompt", o_p, w_p, i_p), ("generation", o_g, w_g, i_g)):
            print(f"{label + ' ' + what:24}{o:8.1f}{w:11.1f}{i:12.1f}{o / w:12.2f}{o / i:14.2f}")


if __name__ == "__main__":
    main()
