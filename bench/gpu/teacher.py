"""Teacher-forced log-probabilities of a token sequence, one engine per process (check.py's
`correctness` step; issue 33, item 7).

    python bench/gpu/teacher.py hearth|llamacpp REQUEST.json

REQUEST: {"model": path, "ids": [token ids], "gpu_layers": n, "threads": n}. Prints one JSON
line: {"logprobs": [log p(ids[i+1] | ids[..i]) for each position], "seconds": wall time}.
Both engines see the same ids (bench/prompts.py tokenizes with llama.cpp) in batches of 512
(llama.cpp's default batch). Hearth places `gpu_layers` layers on CUDA0 the way the service's
layout does (the last layers, the output layer counted), llama.cpp takes `n_gpu_layers`.
llama.cpp is never imported beside Hearth's ggml: one engine per process.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BATCH = 512


def next_token_logprobs(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Row i of `logits` scores position i; the log-probability it gives ids[i + 1]."""
    rows = logits[:-1].astype(np.float64)
    top = rows.max(-1, keepdims=True)
    log_norm = np.log(np.exp(rows - top).sum(-1)) + top[:, 0]
    return rows[np.arange(len(rows)), ids[1:]] - log_norm


def hearth(req: dict) -> np.ndarray:
    sys.path.insert(0, str(REPO))
    from hearth.engine.forward import ForwardEngine
    from hearth.engine.input import PassInput
    from hearth.engine.ml.placement import DevicePlacement
    from hearth.engine.model import load_model
    from hearth.plugins.registry import default_registry

    ids = np.asarray(req["ids"], dtype=np.int32)
    placement = None
    if req.get("gpu_layers", 0) > 0:
        layers = int(req["layers"])  # blocks + the output layer
        first = max(0, layers - int(req["gpu_layers"]))
        placement = DevicePlacement({"CUDA0": tuple(range(first, layers))})
    loaded = load_model(
        req["model"],
        registry=default_registry(),
        num_threads=req.get("threads"),
        placement=placement,
    )
    engine = ForwardEngine(loaded, num_ctx=len(ids) + 16, num_batch=BATCH)
    out = []
    for start in range(0, len(ids), BATCH):
        part = ids[start : start + BATCH]
        m = len(part)
        pass_ = PassInput(part, np.arange(start, start + m), np.zeros(m, np.int32), np.arange(m))
        out.append(np.asarray(engine.forward(pass_), dtype=np.float32))
    return next_token_logprobs(np.concatenate(out), ids)


def llamacpp(req: dict) -> np.ndarray:
    from llama_cpp import Llama

    ids = [int(t) for t in req["ids"]]
    llm = Llama(
        req["model"],
        n_ctx=len(ids) + 16,
        n_batch=BATCH,
        n_gpu_layers=int(req.get("gpu_layers", 0)),
        n_threads=req.get("threads") or None,
        n_threads_batch=req.get("threads") or None,
        logits_all=True,
        verbose=False,
    )
    llm.eval(ids)
    logits = np.asarray(llm.scores[: len(ids)], dtype=np.float32)
    return next_token_logprobs(logits, np.asarray(ids))


def main() -> None:
    engine, path = sys.argv[1], sys.argv[2]
    req = json.loads(Path(path).read_text())
    start = time.perf_counter()
    lp = {"hearth": hearth, "llamacpp": llamacpp}[engine](req)
    seconds = time.perf_counter() - start
    print(json.dumps({"logprobs": [float(x) for x in lp], "seconds": round(seconds, 2)}))


if __name__ == "__main__":
    main()
