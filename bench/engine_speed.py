"""Prompt and generation speed of our engine beside llama.cpp's, same model, same run.

    .venv/bin/python bench/engine_speed.py [--model PATH] [--threads 2] [--prompt 512]
                                           [--generate 128] [--rounds 3]

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


def _default_model() -> str:
    sys.path.insert(0, str(REPO))
    from hearth.default_model import default_model_path

    return str(default_model_path())


def _token_ids(model: str, n: int) -> list[int]:
    """A natural-text prompt of exactly n tokens (BOS first), from llama.cpp's tokenizer."""
    code = (
        "import json,sys; from llama_cpp import Llama;"
        "m=Llama(sys.argv[1], vocab_only=True, verbose=False);"
        "t=' '.join(['The history of the lighthouse on the northern cliffs begins in 1821, when'"
        " ' a storm wrecked three ships and the town decided it would never happen again.']*80);"
        "print(json.dumps(m.tokenize(t.encode(), add_bos=True)[: int(sys.argv[2])]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, model, str(n)], capture_output=True, text=True
    )
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout)


def _run(worker: str, req: dict) -> list[dict]:
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
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--generate", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2, help="measurements per process")
    args = ap.parse_args()
    model = args.model or _default_model()
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
    ours: list[dict] = []
    theirs: list[dict] = []
    for r in range(args.rounds):
        order = [("ours", ours), ("llamacpp", theirs)]
        for name, sink in order if r % 2 == 0 else order[::-1]:
            sink.extend(_run(name, req))

    def rate(runs: list[dict], key: str, n: int) -> float:
        return statistics.median(n / run[key] for run in runs)

    n_p, n_g = len(ids), args.generate
    o_p, o_g = rate(ours, "prompt_s", n_p), rate(ours, "gen_s", n_g)
    w_p, w_g = rate(theirs, "prompt_s", n_p), rate(theirs, "gen_s", n_g)
    i_p, i_g = rate(theirs, "internal_prompt_s", n_p), rate(theirs, "internal_gen_s", n_g)
    print(f"model {Path(model).name}, {args.threads} threads, prompt {n_p} tokens, "
          f"generation {n_g} tokens, {len(ours)} measurements per engine")  # fmt: skip
    head = ["hearth", "llama.cpp", "(internal)", "ratio wall", "ratio strict"]
    print(f"{'':12}{head[0]:>10}{head[1]:>11}{head[2]:>12}{head[3]:>12}{head[4]:>14}")
    print(f"{'prompt t/s':12}{o_p:10.1f}{w_p:11.1f}{i_p:12.1f}{o_p / w_p:12.2f}{o_p / i_p:14.2f}")
    print(f"{'gen t/s':12}{o_g:10.1f}{w_g:11.1f}{i_g:12.1f}{o_g / w_g:12.2f}{o_g / i_g:14.2f}")


if __name__ == "__main__":
    main()
