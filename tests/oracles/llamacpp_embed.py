"""llama.cpp embeddings oracle: `python llamacpp_embed.py REQUEST.json RESULT.npz`.

REQUEST: {"model": path, "texts": [str], "pooling": "last"|"mean", "n_ctx": int}
RESULT: emb_i (L2-normalised float32) and ids_i (llama.cpp's tokens) per text.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from llamacpp_logits import use_plain_layouts  # shipped in hearth.plugins.testing


def main() -> None:
    with open(sys.argv[1]) as f:
        req = json.load(f)
    import llama_cpp
    from llama_cpp import Llama

    use_plain_layouts()

    pooling = {
        "last": llama_cpp.LLAMA_POOLING_TYPE_LAST,
        "mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN,
    }[req.get("pooling", "last")]
    n_ctx = int(req.get("n_ctx", 512))
    llm = Llama(
        req["model"],
        embedding=True,
        pooling_type=pooling,
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_ubatch=n_ctx,
        n_threads=2,
        verbose=False,
    )
    out = {}
    for i, text in enumerate(req["texts"]):
        vec = np.asarray(llm.embed(text, normalize=True), dtype=np.float32)
        out[f"emb_{i}"] = vec.reshape(-1)
        out[f"ids_{i}"] = np.array(llm.tokenize(text.encode(), add_bos=True), dtype=np.int32)
    np.savez(sys.argv[2], **out)


if __name__ == "__main__":
    main()
