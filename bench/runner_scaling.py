"""What the batching loop buys: parallel streams, and prompt-cache reuse across chat turns.

    .venv/bin/python bench/runner_scaling.py [--model PATH | --shape NAME] [--threads 2]
                                             [--tokens 128] [--speculate off]
                                             [--hearth-only] [--repeat-penalty 1.5]

1. Aggregate generation speed of 4 greedy streams decoded together, against one stream alone
   (same runner, same prompts; the ratio is the figure), beside llama.cpp's own figures for
   the same thing in the same run (its Python binding driven at the batch level). With
   default settings (speculation on); `--speculate off` turns drafting off in the requests.
   `--hearth-only` leaves llama.cpp and the chat turns out. `--repeat-penalty 1.5` makes the
   greedy text of the default model stop repeating itself (nothing for prompt lookup to find:
   what speculation costs where it cannot pay).
2. A chat turn after a ~1500-token history: the follow-up's prompt time against the first
   turn's (the follow-up should only evaluate its new tokens).
Each figure is the median of `--rounds` rounds; each round measures Hearth and then llama.cpp.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from machine import cpu_description  # noqa: E402
from shapes import add_model_arguments, model_from_args  # noqa: E402

from hearth.runner.core import Runner, RunnerConfig  # noqa: E402
from hearth.runner.protocol import (  # noqa: E402
    CompletionDone,
    CompletionError,
    CompletionOptions,
    CompletionRequest,
    to_wire,
)

PROMPTS = [
    "Write a short story about a lighthouse keeper who",
    "List the planets of the solar system and describe",
    "Explain step by step how bread is made, starting with",
    "The history of the printing press begins in",
]


def _finish(seq) -> dict:  # seq: a runner Sequence
    """The last line, as JSON."""
    done = None
    while (event := seq.events.get()) is not None:
        if isinstance(event, CompletionError):
            raise RuntimeError(event.error)
        done = event if isinstance(event, CompletionDone) else done
    assert done is not None
    return to_wire(done)


def _streams(
    runner: Runner,
    prompts: list[str],
    tokens: int,
    round_no: int,
    speculate: bool = True,
    repeat_penalty: float = 1.0,
) -> float:
    """Generated tokens per second, all streams together, first submit to last done."""
    options = CompletionOptions(
        temperature=0, repeat_penalty=repeat_penalty, num_predict=tokens, speculate=speculate
    )
    # A distinct prefix per round so the prompt cache cannot help.
    reqs = [CompletionRequest(prompt=f"[{round_no}] {p}", options=options) for p in prompts]
    results: list[dict] = []
    lock = threading.Lock()
    start = time.perf_counter()
    seqs = [runner.completion(r) for r in reqs]

    def wait(seq) -> None:
        done = _finish(seq)
        with lock:
            results.append(done)

    threads = [threading.Thread(target=wait, args=(s,)) for s in seqs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    drafts = " ".join(f"{d.get('drafted', 0)}/{d.get('accepted', 0)}" for d in results)
    print(f"  {len(prompts)} stream(s), round {round_no}: drafted/accepted {drafts}")
    return sum(d["eval_count"] for d in results) / elapsed


_REPORT = (
    "the harbour town kept its lighthouse burning through every winter storm while fishermen "
    "argued about the price of rope and the schoolteacher wrote letters"
)


def _llamacpp_streams(runner: Runner, model: str, args: argparse.Namespace) -> list[dict]:
    import json
    import subprocess
    import tempfile

    prompts = [runner.encode(p) for p in PROMPTS]
    req = {
        "model": model,
        "prompts": prompts,
        "streams": len(PROMPTS),
        "generate": args.tokens,
        "threads": args.threads,
        "n_ctx": 4096,
        "reps": 1,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(req, f)
    worker = REPO / "bench" / "workers.py"
    out = subprocess.run(
        [sys.executable, str(worker), "llamacpp_parallel", f.name], capture_output=True, text=True
    )
    Path(f.name).unlink()
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return list(json.loads(out.stdout.strip().splitlines()[-1])["runs"])


def _history(n_words: int = 1100) -> list[dict]:
    words = _REPORT.split(" ")
    text = " ".join(words[i % len(words)] for i in range(n_words))
    return [{"role": "user", "content": f"Summarise this report:\n{text}"}]


def _chat_turns(runner: Runner, template: str, bos: str, round_no: int) -> tuple[float, float]:
    from hearth.server.prompting.templates import render_chat

    options = CompletionOptions(temperature=0, repeat_penalty=1.0, num_predict=48)
    messages = _history()
    messages[0]["content"] = f"({round_no}) " + messages[0]["content"]
    first = render_chat(template, messages, bos_token=bos)
    done1 = _finish(runner.completion(CompletionRequest(prompt=first, options=options)))
    reply = runner.detokenize(done1["context"][len(runner.encode(first)) :])
    messages += [
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "Now in one sentence, please."},
    ]
    second = render_chat(template, messages, bos_token=bos)
    done2 = _finish(runner.completion(CompletionRequest(prompt=second, options=options)))
    print(
        f"  turn 1: {done1['prompt_eval_count']} prompt tokens evaluated; turn 2: "
        f"{done2['prompt_eval_count']} evaluated, {done2['prompt_cached']} from the cache"
    )
    return done1["prompt_eval_duration"] / 1e9, done2["prompt_eval_duration"] / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_arguments(ap)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--speculate", choices=["on", "off"], default="on")
    ap.add_argument("--hearth-only", action="store_true")
    ap.add_argument("--repeat-penalty", type=float, default=1.0)
    args = ap.parse_args()
    spec = args.speculate == "on"
    model = model_from_args(args)
    runner = Runner(
        RunnerConfig(model, num_ctx=2048, parallel=4, num_batch=512, threads=args.threads)
    )
    try:
        _streams(runner, PROMPTS[:1], 16, -1, spec)  # warm up
        one, four, cpp = [], [], []
        for r in range(args.rounds):  # interleaved, so a slow spell of the machine hits both
            penalty = args.repeat_penalty
            one.append(_streams(runner, PROMPTS[:1], args.tokens, r, spec, penalty))
            four.append(_streams(runner, PROMPTS, args.tokens, 100 + r, spec, penalty))
            if not args.hearth_only:
                cpp += _llamacpp_streams(runner, model, args)
        one_m, four_m = statistics.median(one), statistics.median(four)
        if args.hearth_only:
            print(f"model {Path(model).name}, {args.threads} threads, {args.tokens} tokens/stream,"
                  f" speculation {args.speculate}, repeat penalty {args.repeat_penalty}:"
                  f" 1 stream {one_m:.1f} tok/s, 4 streams "
                  f"{four_m:.1f} tok/s, 4 vs 1 {four_m / one_m:.2f}x")  # fmt: skip
            return
        c1 = statistics.median(r["one"] for r in cpp)
        c4 = statistics.median(r["many"] for r in cpp)
        print(cpu_description())
        print(f"model {Path(model).name}, {args.threads} threads, {args.tokens} tokens/stream")
        kernel = runner.engine.loaded.backend.few_rows_kernel
        kinds = ", ".join(sorted(t.name for t in kernel.types)) if kernel else "off"
        print(f"Hearth's few-rows CPU kernel: {kinds} (HEARTH_CPU_KERNELS=0 turns it off)")
        print(f"{'':10}{'hearth':>10}{'llama.cpp':>11}{'ratio':>8}")
        print(f"{'1 stream':10}{one_m:10.1f}{c1:11.1f}{one_m / c1:8.2f}")
        print(f"{'4 streams':10}{four_m:10.1f}{c4:11.1f}{four_m / c4:8.2f}")
        print(f"{'4 vs 1':10}{four_m / one_m:9.2f}x{c4 / c1:10.2f}x")

        loaded = runner.engine.loaded
        template = loaded.file.metadata.string("tokenizer.chat_template") or (
            loaded.model.default_chat_template
        )
        bos = loaded.tokenizer.token_bytes(loaded.tokenizer.bos_id or 0).decode()
        turns = [_chat_turns(runner, template, bos, r) for r in range(args.rounds)]
        t1 = statistics.median(t for t, _ in turns)
        t2 = statistics.median(t for _, t in turns)
        print(
            f"chat: first turn prompt {t1 * 1000:.0f} ms, follow-up prompt {t2 * 1000:.0f} ms "
            f"-> {t2 / t1:.1%} of the first"
        )
    finally:
        runner.close()


if __name__ == "__main__":
    main()
