"""Generation speed with speculative decoding: Hearth without and with prompt lookup, beside
llama.cpp without and with its own prompt-lookup draft, on the same prompts, in one run.

    .venv/bin/python bench/speculative.py [--model PATH | --shape NAME] [--threads 2]
                                          [--generate 320] [--rounds 3]
                                          [--only chat,chat-sampled] [--hearth-only]

Workloads (the model's chat template; greedy, so that llama.cpp's lookup is exact too):
  edit     rewrite a given ~300-token piece of code with one small change (a rename)
  summary  summarize a given ~300-token text, quoting it
  chat     plain chat (nothing to look up: speculation must cost nothing there)

Each engine runs in a process of its own (one libggml per process), the workers alternating
which goes first each round; the figures are medians of generation tok/s (tokens after the
first / the time after the first) over rounds. Hearth's runner runs with `speculate` false
and true (the text must be the same: the bench checks it), llama.cpp through
llama-cpp-python with no draft and with `LlamaPromptLookupDecoding` (llama_speculative.py;
num_pred_tokens 10, its default). Ratios above 1 mean Hearth with prompt lookup is faster.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from machine import cpu_description  # noqa: E402
from shapes import add_model_arguments, model_from_args  # noqa: E402

CODE = '''def moving_average(values, window):
    """The mean of each run of `window` consecutive values."""
    if window <= 0:
        raise ValueError("window must be positive")
    out = []
    total = 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            out.append(total / window)
    return out


def rate(events, seconds):
    """Events per second over the last `seconds` of a sorted list of timestamps."""
    if not events:
        return 0.0
    end = events[-1]
    recent = [t for t in events if end - t <= seconds]
    return len(recent) / seconds


class Meter:
    """Counts events and reports their rate and moving average."""

    def __init__(self, window=10, seconds=60.0):
        self.window = window
        self.seconds = seconds
        self.events = []
        self.sizes = []

    def record(self, timestamp, size):
        self.events.append(timestamp)
        self.sizes.append(size)

    def report(self):
        return {
            "rate": rate(self.events, self.seconds),
            "average": moving_average(self.sizes, self.window),
        }
'''

TEXT = (
    "The lighthouse on the northern cliffs was built in 1821, after a winter storm wrecked "
    "three merchant ships within sight of the harbour. The town raised the money itself: "
    "every family gave what it could, and the fishermen gave a share of their catch for two "
    "years. The tower is forty metres tall and made of granite from the quarry behind the "
    "church. Its first lamp burned whale oil and could be seen twelve miles out to sea. In "
    "1870 the oil lamp was replaced by a paraffin burner and a Fresnel lens made in Paris, "
    "which doubled its range. The keepers lived in a cottage at the foot of the tower with "
    "their families, and for ninety years the light was tended by the same family, the "
    "Marrows, father to son. During the war the light was dimmed so that it could not guide "
    "enemy ships, and the keeper at the time, Ellen Marrow, kept a log of every vessel she "
    "saw. The light was electrified in 1952 and automated in 1991, when the last keeper left. "
    "Today the cottage is a small museum, and the log Ellen Marrow kept is its most visited "
    "exhibit. Every year on the anniversary of the wreck, the town gathers at the foot of "
    "the tower and reads the names of the sailors who were lost."
)

WORKLOADS = {
    "edit": "Rewrite this code with the function `rate` renamed to `speed` everywhere. Reply "
    f"with the whole code and nothing else.\n\n```python\n{CODE}```",
    "summary": "Summarize this text in a few sentences, quoting its most important "
    f"sentences word for word.\n\n{TEXT}",
    "chat": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
}

# The chat prompt once more, sampled (Hearth only: llama.cpp's lookup is exact for greedy
# decoding alone). Greedy, the small base model loops and its own context predicts it; sampled,
# it rarely repeats itself, which is the case where drafting must cost nothing.
SAMPLED = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "seed": 7}


def _chat(text: str) -> str:
    """Gemma 3's chat template, one user turn (the default model's)."""
    return f"<start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n"


# -- workers (each in its own process) ------------------------------------------------------------
def _hearth(req: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, req["repo"])
    from hearth.runner.core import Runner, RunnerConfig
    from hearth.runner.protocol import (
        CompletionDone,
        CompletionError,
        CompletionOptions,
        CompletionRequest,
    )

    runner = Runner(
        RunnerConfig(req["model"], num_ctx=2048, num_batch=512, parallel=1, threads=req["threads"])
    )
    out: dict[str, Any] = {"speculation": runner.speculation()}
    try:
        runs = [(name, ids, {"temperature": 0}) for name, ids in req["prompts"].items()]
        runs.append(("chat-sampled", req["prompts"]["chat"], SAMPLED))
        for name, ids, sampling in runs:
            if name not in req["only"]:
                continue
            for speculate in (False, True):
                opts = CompletionOptions(
                    **sampling, repeat_penalty=1.0, num_predict=req["generate"],
                    speculate=speculate,
                )  # fmt: skip
                seq = runner.completion(CompletionRequest(tokens=ids, options=opts))
                text, done = [], None
                while (event := seq.events.get()) is not None:
                    if isinstance(event, CompletionError):
                        raise SystemExit(event.error)
                    if isinstance(event, CompletionDone):
                        done = event
                    else:
                        text.append(event.content)
                assert done is not None
                seconds = done.eval_duration / 1e9
                out[f"{name}/{'lookup' if speculate else 'off'}"] = {
                    "tok_s": (done.eval_count - 1) / seconds if seconds else 0.0,
                    "tokens": done.eval_count,
                    "drafted": done.drafted,
                    "accepted": done.accepted,
                    "text": "".join(text),
                }
    finally:
        runner.close()
    return out


def _llamacpp(req: dict[str, Any]) -> dict[str, Any]:
    from llama_cpp import Llama, llama_vocab_is_eog
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    out: dict[str, Any] = {}
    for kind in ("off", "lookup"):
        draft = LlamaPromptLookupDecoding(num_pred_tokens=10) if kind == "lookup" else None
        llm = Llama(
            req["model"], n_ctx=2048, n_batch=512, n_threads=req["threads"],
            n_threads_batch=req["threads"], draft_model=draft, verbose=False,
            # A draft needs every row's logits; llama-cpp-python sizes its score buffer from
            # this argument (not from the draft), so it must be said.
            logits_all=draft is not None,
        )  # fmt: skip
        for name, ids in req["prompts"].items():
            if name not in req["only"]:
                continue
            llm.reset()
            first, count, t_first = None, 0, 0.0
            for token in llm.generate(ids, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
                if first is None:
                    first, t_first = token, time.perf_counter()
                if llama_vocab_is_eog(llm._model.vocab, token) or count >= req["generate"]:
                    break
                count += 1
            seconds = time.perf_counter() - t_first
            out[f"{name}/{kind}"] = {
                "tok_s": (count - 1) / seconds if seconds and count > 1 else 0.0,
                "tokens": count,
            }
        llm.close()
    return out


def _tokens(model: str, texts: dict[str, str]) -> dict[str, list[int]]:
    """The prompts' ids as llama.cpp makes them (special tokens parsed, BOS first), in a
    process of its own."""
    code = (
        "import json,sys; from llama_cpp import Llama;"
        "m=Llama(sys.argv[1], vocab_only=True, verbose=False);"
        "t=json.loads(sys.argv[2]);"
        "print(json.dumps({k: m.tokenize(v.encode(), add_bos=True, special=True)"
        " for k, v in t.items()}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, model, json.dumps(texts)], capture_output=True, text=True
    )
    if out.returncode:
        raise SystemExit(out.stderr[-1500:])
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _run(worker: str, req: dict[str, Any]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(req, f)
    out = subprocess.run(
        [sys.executable, __file__, "--worker", worker, f.name], capture_output=True, text=True
    )
    Path(f.name).unlink()
    if out.returncode:
        raise SystemExit(f"{worker} failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_arguments(ap)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--generate", type=int, default=320, help="tokens at most per generation")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--only", default=",".join([*WORKLOADS, "chat-sampled"]), help="workloads, comma-separated"
    )
    ap.add_argument("--hearth-only", action="store_true", help="leave llama.cpp out")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    only = args.only.split(",")
    if unknown := set(only) - {*WORKLOADS, "chat-sampled"}:
        names = ", ".join([*WORKLOADS, "chat-sampled"])
        raise SystemExit(f"unknown workloads {sorted(unknown)}; there are {names}")
    if args.worker:
        kind, path = args.worker
        req = json.loads(Path(path).read_text())
        print(json.dumps(_hearth(req) if kind == "hearth" else _llamacpp(req)))
        return
    model = model_from_args(args)
    prompts = _tokens(model, {name: _chat(text) for name, text in WORKLOADS.items()})
    req = {
        "repo": str(REPO),
        "model": model,
        "prompts": prompts,
        "threads": args.threads,
        "generate": args.generate,
        "only": only,
    }
    runs: dict[str, list[dict[str, Any]]] = {"hearth": [], "llamacpp": []}
    workers = ["hearth"] if args.hearth_only else ["hearth", "llamacpp"]
    for r in range(args.rounds):
        for worker in workers[:: 1 if r % 2 == 0 else -1]:
            runs[worker].append(_run(worker, req))

    def median(worker: str, key: str) -> float:
        if not runs[worker] or key not in runs[worker][0]:
            return float("nan")  # not run
        return statistics.median(run[key]["tok_s"] for run in runs[worker])

    print(cpu_description())
    speculation = runs["hearth"][0]["speculation"]
    print(
        f"model {Path(model).name}, {args.threads} threads, greedy, at most {args.generate} "
        f"tokens, {args.rounds} rounds, medians of generation tok/s; Hearth's speculation: "
        f"{'on' if speculation['enabled'] else 'off (' + speculation['reason'] + ')'}"
    )
    head = ("workload", "prompt", "H off", "H lookup", "cpp off", "cpp lookup", "accepted",
            "vs H off", "vs cpp off", "vs cpp lookup", "same text")  # fmt: skip
    print(f"{head[0]:10}{head[1]:>7}" + "".join(f"{h:>11}" for h in head[2:7]) + "".join(
        f"{h:>14}" for h in head[7:]))  # fmt: skip
    for name in [w for w in WORKLOADS if w in only]:
        h_off, h_on = median("hearth", f"{name}/off"), median("hearth", f"{name}/lookup")
        c_off, c_on = median("llamacpp", f"{name}/off"), median("llamacpp", f"{name}/lookup")
        last = runs["hearth"][-1]
        on = last[f"{name}/lookup"]
        accepted = f"{on['accepted']}/{on['drafted']}"
        same = all(run[f"{name}/off"]["text"] == run[f"{name}/lookup"]["text"]
                   for run in runs["hearth"])  # fmt: skip
        print(
            f"{name:10}{len(prompts[name]):7}{h_off:11.1f}{h_on:11.1f}{c_off:11.1f}{c_on:11.1f}"
            f"{accepted:>11}{h_on / h_off:14.2f}{h_on / c_off:14.2f}{h_on / c_on:14.2f}"
            f"{'yes' if same else 'NO':>14}"
        )
    name = "chat-sampled"
    if name not in only:
        return
    h_off, h_on = median("hearth", f"{name}/off"), median("hearth", f"{name}/lookup")
    on = runs["hearth"][-1][f"{name}/lookup"]
    same = all(run[f"{name}/off"]["text"] == run[f"{name}/lookup"]["text"]
               for run in runs["hearth"])  # fmt: skip
    accepted = f"{on['accepted']}/{on['drafted']}"
    print(
        f"{name:10}{len(prompts['chat']):7}{h_off:11.1f}{h_on:11.1f}{'-':>11}{'-':>11}"
        f"{accepted:>11}{h_on / h_off:14.2f}{'-':>14}{'-':>14}{'yes' if same else 'NO':>14}"
    )
    print(f"chat-sampled: the chat prompt sampled with {SAMPLED} (Hearth only)")


if __name__ == "__main__":
    main()
