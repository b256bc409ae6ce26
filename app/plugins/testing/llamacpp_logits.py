"""llama.cpp as an oracle, run in its own process: never import llama_cpp next to Hearth's ggml,
and never import this file from Hearth (it is run as a script: `llamacpp.run_oracle`).

Usage: python llamacpp_logits.py REQUEST.json RESULT.npz

REQUEST: {"model": path, "n_ctx": int, "threads": int,
          "prompts": [{"text": str} | {"ids": [int]}], "greedy": int, "sample_rows": int,
          "top_k": int, "stop_at_eog": bool, "repack": bool (default false)}
RESULT (npz), per prompt i:
  ids_i        the prompt's token ids (llama.cpp's tokenization when text was given)
  argmax_i     teacher-forced top-1 token at every position
  topk_ids_i / topk_vals_i   the top_k logits at every position
  rows_i / rows_idx_i        full logit rows at `sample_rows` evenly spread positions (+ last)
  greedy_i     `greedy` tokens of greedy continuation after the prompt
  greedy_text_i  their text as llama.cpp detokenizes it (UTF-8 bytes)
Exit status 3: llama.cpp does not know the file's architecture (stderr says which).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

UNKNOWN_ARCHITECTURE = 3
_callbacks: list[Any] = []  # llama.cpp keeps calling the log callback: keep it alive


def use_plain_layouts() -> None:
    """Make llama.cpp load weights in their plain layouts (no CPU repacking): its repacked
    Q4_K kernels round a row differently in a batch than alone, so Hearth does not use them
    (see hearth.engine.ml.weights); with this, both run the same kernels."""
    import llama_cpp

    default_params = llama_cpp.llama_cpp.llama_model_default_params

    def plain_params() -> Any:
        params = default_params()
        params.use_extra_bufts = False
        return params

    llama_cpp.llama_cpp.llama_model_default_params = plain_params


def _open(req: dict[str, Any], n_ctx: int) -> Any:
    """The model, or exit with UNKNOWN_ARCHITECTURE when llama.cpp's log says so."""
    import ctypes

    import llama_cpp
    from llama_cpp import Llama

    log: list[str] = []

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def keep(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        log.append(text.decode("utf-8", "replace"))

    _callbacks.append(keep)
    llama_cpp.llama_log_set(keep, ctypes.c_void_p(0))
    try:
        return Llama(
            req["model"],
            n_ctx=n_ctx,
            n_batch=min(512, n_ctx),
            n_threads=int(req.get("threads", 2)),
            n_threads_batch=int(req.get("threads", 2)),
            logits_all=True,
            verbose=False,
        )
    except ValueError:
        unknown = [line for line in "".join(log).splitlines() if "unknown model arch" in line]
        if unknown:
            print(unknown[-1].strip(), file=sys.stderr)
            sys.exit(UNKNOWN_ARCHITECTURE)
        raise


def main() -> None:
    with open(sys.argv[1]) as f:
        req = json.load(f)
    import llama_cpp

    if not req.get("repack", False):
        use_plain_layouts()

    n_ctx = int(req.get("n_ctx", 1024))
    llm = _open(req, n_ctx)
    top_k = int(req.get("top_k", 20))
    out: dict[str, np.ndarray] = {}
    for i, prompt in enumerate(req["prompts"]):
        if "ids" in prompt:
            ids = [int(t) for t in prompt["ids"]]
        else:
            ids = llm.tokenize(prompt["text"].encode(), add_bos=True, special=True)
        llm.reset()
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
        llm.eval(ids)
        scores = np.asarray(llm.scores[: len(ids)], dtype=np.float32)
        out[f"ids_{i}"] = np.array(ids, dtype=np.int32)
        out[f"argmax_{i}"] = scores.argmax(-1).astype(np.int32)
        part = np.argpartition(-scores, top_k, axis=-1)[:, :top_k]
        vals = np.take_along_axis(scores, part, -1)
        order = np.argsort(-vals, axis=-1)
        out[f"topk_ids_{i}"] = np.take_along_axis(part, order, -1).astype(np.int32)
        out[f"topk_vals_{i}"] = np.take_along_axis(vals, order, -1)
        n_rows = int(req.get("sample_rows", 8))
        idx = np.unique(np.r_[np.linspace(0, len(ids) - 1, n_rows).astype(int), len(ids) - 1])
        out[f"rows_idx_{i}"] = idx.astype(np.int32)
        out[f"rows_{i}"] = scores[idx]
        greedy = []
        last = scores[-1]
        for _ in range(int(req.get("greedy", 0))):
            tok = int(np.argmax(last))
            if req.get("stop_at_eog") and llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok):
                break
            greedy.append(tok)
            llm.eval([tok])
            last = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        out[f"greedy_{i}"] = np.array(greedy, dtype=np.int32)
        out[f"greedy_text_{i}"] = np.frombuffer(llm.detokenize(greedy) or b" ", dtype=np.uint8)
    np.savez(sys.argv[2], allow_pickle=False, **out)


if __name__ == "__main__":
    main()
