"""llama-cpp-python's own answers, in a process of their own (never beside Hearth's ggml).

Usage: python llamacpp_reference.py REQUEST.json  -> JSON on stdout
REQUEST: {"model": path, "n_ctx": int, "greedy": [{"prompt": str, "n": int}],
          "embed": [str]}
RESULT: {"greedy": [{"ids": [prompt ids], "tokens": [ids], "text": str, "logprobs": [float]}],
         "embed": [[float]]}  (greedy: argmax at each step; logprobs: the chosen token's
         log-softmax; embed: last-token pooling, L2-normalised, as llama.cpp's LAST pooling)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main() -> None:
    import llama_cpp
    from llama_cpp import Llama

    req = json.loads(Path(sys.argv[1]).read_text())
    out: dict[str, list] = {"greedy": [], "embed": []}
    llm = Llama(req["model"], n_ctx=req["n_ctx"], n_threads=2, logits_all=True, verbose=False)
    for item in req.get("greedy", []):
        ids = llm.tokenize(item["prompt"].encode(), add_bos=True, special=True)
        llm.reset()
        llm.eval(ids)
        tokens, logprobs = [], []
        for _ in range(item["n"]):
            row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            tok = int(row.argmax())
            lse = row.max() + np.log(np.exp(row - row.max()).sum())
            tokens.append(tok)
            logprobs.append(float(row[tok] - lse))
            if llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok):
                break
            llm.eval([tok])
        text = llm.detokenize(tokens).decode("utf-8", "replace")
        out["greedy"].append({"ids": ids, "tokens": tokens, "text": text, "logprobs": logprobs})
    if req.get("embed"):
        emb = Llama(
            req["model"],
            n_ctx=req["n_ctx"],
            n_threads=2,
            embedding=True,
            pooling_type=llama_cpp.LLAMA_POOLING_TYPE_LAST,
            verbose=False,
        )
        for text in req["embed"]:
            vec = np.asarray(emb.embed(text, normalize=False), dtype=np.float64)
            out["embed"].append((vec / np.linalg.norm(vec)).tolist())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
