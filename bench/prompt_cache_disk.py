"""What the prompt cache on disk buys: the first reply after a restart in a long chat.

    .venv/bin/python bench/prompt_cache_disk.py [--model PATH | --shape NAME] [--threads 2]
                                               [--words 2800]

A chat of about 3000 tokens (`--words` of history, rendered with the model's chat template)
gets its first answer from a runner, which is then closed, as the service does with its
runners when it stops (the disk cache saves the slot). A new runner (the restart) is asked the
follow-up turn: time to first token with the disk cache, against a new runner without it (which
evaluates the whole chat again). Same prompts, same machine, in one run; each figure is the
median of `--rounds` rounds, each round a chat of its own (no cached prefix shared between
rounds). Also: what saving cost on the runner thread (the host copy at unload), the writer
thread's time, and the file's size.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from machine import cpu_description  # noqa: E402
from shapes import add_model_arguments, model_from_args  # noqa: E402

from hearth.runner.core import Runner, RunnerConfig  # noqa: E402
from hearth.runner.protocol import (  # noqa: E402
    CompletionChunk,
    CompletionDone,
    CompletionError,
    CompletionOptions,
    CompletionRequest,
)

_REPORT = (
    "the harbour town kept its lighthouse burning through every winter storm while fishermen "
    "argued about the price of rope and the schoolteacher wrote letters"
)
OPTIONS = CompletionOptions(temperature=0, repeat_penalty=1.0, num_predict=32)


def _ask(runner: Runner, prompt: str) -> tuple[float, CompletionDone]:
    """(seconds from submitting to the first token's chunk, the final record)."""
    start = time.perf_counter()
    seq = runner.completion(CompletionRequest(prompt=prompt, options=OPTIONS))
    first, done = None, None
    while (event := seq.events.get()) is not None:
        if isinstance(event, CompletionError):
            raise RuntimeError(event.error)
        if isinstance(event, CompletionChunk) and first is None:
            first = time.perf_counter() - start
        if isinstance(event, CompletionDone):
            done = event
    assert first is not None and done is not None
    return first, done


def _render(runner: Runner, messages: list[dict]) -> str:
    """`messages` as the model's chat template renders them (as the service does)."""
    from hearth.server.prompting.templates import render_chat

    loaded = runner.engine.loaded  # type: ignore[attr-defined]
    template = loaded.file.metadata.string("tokenizer.chat_template") or (
        loaded.model.default_chat_template
    )
    bos = loaded.tokenizer.token_bytes(loaded.tokenizer.bos_id or 0).decode()
    return render_chat(template, messages, bos_token=bos)


def _history(words: int, round_no: int) -> list[dict]:
    parts = _REPORT.split(" ")
    text = " ".join(parts[i % len(parts)] for i in range(words))
    return [{"role": "user", "content": f"({round_no}) Summarise this report:\n{text}"}]


def _round(args: argparse.Namespace, model: str, cache: Path, round_no: int) -> dict:
    def start(disk: bool) -> Runner:
        config = RunnerConfig(
            model,
            num_ctx=4096,
            parallel=1,
            num_batch=512,
            threads=args.threads,
            prompt_cache_dir=str(cache) if disk else None,
            prompt_cache_bytes=8 << 30,
        )
        runner = Runner(config)
        runner.prompt_cache.ready.wait()
        return runner

    runner = start(disk=True)
    messages = _history(args.words, round_no)
    first_prompt = _render(runner, messages)
    _, done = _ask(runner, first_prompt)
    prompt_tokens = len(runner.encode(first_prompt))
    reply = runner.detokenize(done.context[prompt_tokens:])
    follow = _render(
        runner,
        [
            *messages,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "Now in one sentence, please."},
        ],
    )
    began = time.perf_counter()
    runner.loop.stop()
    runner.prompt_cache.slots.save_all()  # what Runner.close does: the host copy, on this thread
    copied = time.perf_counter() - began
    disk = runner.prompt_cache.disk
    assert disk is not None
    disk.flush()
    written = time.perf_counter() - began
    runner.close()
    size = sum(p.stat().st_size for p in cache.glob("*/*.kv"))

    restarted = start(disk=True)
    with_disk, done_disk = _ask(restarted, follow)
    restarted.close()
    cold = start(disk=False)
    without, done_cold = _ask(cold, follow)
    cold.close()
    if done_disk.context != done_cold.context:
        raise SystemExit("the answers differ with and without the disk cache")
    return {
        "chat_tokens": done_cold.prompt_eval_count,
        "evaluated_with_disk": done_disk.prompt_eval_count,
        "ttft_disk": with_disk,
        "ttft_cold": without,
        "copy_s": copied,
        "write_s": written,
        "file_bytes": size,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_arguments(ap)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--words", type=int, default=2800, help="history words (~3000 tokens)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    model = model_from_args(args)
    rounds = []
    for r in range(args.rounds):
        cache = Path(tempfile.mkdtemp(prefix="hearth-bench-cache-"))
        try:
            rounds.append(_round(args, model, cache, r))
        finally:
            shutil.rmtree(cache, ignore_errors=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    print(cpu_description())
    print(f"model {Path(model).name}, {args.threads} threads, {args.rounds} rounds (medians)")
    print(
        f"follow-up after a restart in a {med('chat_tokens'):.0f}-token chat: "
        f"{med('evaluated_with_disk'):.0f} tokens evaluated with the disk cache"
    )
    print(f"time to first token, disk cache on:  {med('ttft_disk') * 1000:8.0f} ms")
    print(f"time to first token, disk cache off: {med('ttft_cold') * 1000:8.0f} ms")
    print(f"speed-up: {med('ttft_cold') / med('ttft_disk'):.1f}x")
    print(
        f"saving at unload: host copy {med('copy_s') * 1000:.0f} ms on the runner thread, "
        f"written by {med('write_s') * 1000:.0f} ms, file {med('file_bytes') / 2**20:.1f} MiB"
    )


if __name__ == "__main__":
    main()
