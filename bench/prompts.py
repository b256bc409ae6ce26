"""Prompts the benchmarks share, and their token ids as llama.cpp makes them."""

import json
import subprocess
import sys

# About 480 tokens (one batch of 512) with Gemma 3's tokenizer, as llama-bench's pp512; the
# round number comes first, so a later round's prompt shares no cached prefix.
LONG_PROMPT = (
    "Round {r}. "
    + " ".join(
        f"Note {i}: the history of the printing press begins in the fifteenth century, when metal "
        "movable type, oil-based inks and a screw press came together in one workshop."
        for i in range(13)
    )
    + " Describe in detail how the invention spread across Europe and what it changed:"
)


def llamacpp_tokens(model: str, text: str) -> list[int]:
    """`text` tokenized by llama.cpp for `model` (BOS first), in a process of its own (never
    beside another libggml). RuntimeError with llama.cpp's words when it cannot."""
    code = (
        "import json,sys; from llama_cpp import Llama;"
        "m=Llama(sys.argv[1], vocab_only=True, verbose=False);"
        "print(json.dumps(m.tokenize(sys.argv[2].encode(), add_bos=True)))"
    )
    out = subprocess.run([sys.executable, "-c", code, model, text], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-1500:])
    return [int(t) for t in json.loads(out.stdout.strip().splitlines()[-1])]
