"""A checkpoint converted by Hearth's converter, and the converted file run by Hearth's engine
(its logits, its greedy continuation, its tokens): shared by the conversion tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hearth.convert import convert_checkpoint
from hearth.engine.forward import ForwardEngine
from hearth.engine.input import PassInput
from hearth.engine.ml.tensor import DType
from hearth.plugins.registry import default_converters, default_registry, load_installed_model
from hearth.plugins.testing.parity import greedy


def convert(folder: Path, out: Path, quantize: str | None = "f32", **kw: Any) -> Path:
    convert_checkpoint(
        folder,
        out,
        converters=default_converters(),
        registry=default_registry(),
        quantize=quantize,
        **kw,
    )
    return out


def hearth_run(path: Path, ids: list[int], n_greedy: int = 8) -> tuple[np.ndarray, list[int]]:
    """Hearth's logits `[n, vocab]` for `ids` and its greedy continuation (F32 KV cache)."""
    model = load_installed_model(path)
    engine = ForwardEngine(model, num_ctx=128, num_batch=128, kv_dtype=DType.F32)
    try:
        n = len(ids)
        rows = np.arange(n, dtype=np.int32)
        logits = engine.forward(PassInput(np.array(ids), rows, np.zeros(n, np.int32), rows))
        return logits, greedy(engine, logits[-1], n, n_greedy)
    finally:
        engine.close()
        model.close()


def tokenize(path: Path, text: str) -> list[int]:
    model = load_installed_model(path)
    try:
        return list(model.tokenizer.encode(text, add_special=True))
    finally:
        model.close()
