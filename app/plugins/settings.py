"""Settings a plugin reads from a file's metadata the way llama.cpp reads them: RoPE options
(`read_rope`, linear and YaRN scaling included; `shift_rope` for moving cached keys) and
which layers use a sliding window (`sliding_layers`, llama.cpp's `load_swa_pattern`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..engine.architecture import Metadata
from ..engine.ml import RopeOptions

__all__ = ["read_rope", "shift_rope", "sliding_layers"]


def read_rope(meta: Metadata, *, base: float, neox: bool, dims: int) -> RopeOptions:
    """RoPE options from `rope.*` metadata: `dimension_count` (default `dims`), `freq_base`
    (default `base`), `scaling.type`/`scaling.factor` (linear, or YaRN as llama.cpp applies
    it: ext_factor 1, the attention factor its context computes, `scaling.attn_factor`),
    `original_context_length`. `neox`: rotate the two halves of each head (GPT-NeoX, Gemma,
    Qwen) instead of pairs."""
    scaling = meta.string("rope.scaling.type", "none")
    factor = meta.float("rope.scaling.factor", 1.0) or 1.0
    original = meta.uint("rope.scaling.original_context_length", 0)
    opts = RopeOptions(
        dims=meta.uint("rope.dimension_count", dims),
        base=meta.float("rope.freq_base", base),
        scale=1.0 / factor if scaling in ("linear", "yarn") else 1.0,
        neox=neox,
        original_context=original,
    )
    if scaling != "yarn":
        return opts
    # llama_context's YaRN settings (llama.cpp reads no yarn_* key for these files): the
    # attention factor is mscale(factor) / (1 + 0.1 ln factor), in F32 as there, since ggml
    # multiplies the (1 + 0.1 ln factor) back in.
    f = np.float32(factor)
    mscale = np.float32(0.1) * np.log(f) + np.float32(1.0) if f > 1 else np.float32(1.0)
    attn = mscale * (np.float32(1.0) / (np.float32(1.0) + np.float32(0.1) * np.log(f)))
    attn *= np.float32(meta.float("rope.scaling.attn_factor", 1.0))
    return dataclasses.replace(
        opts,
        ext_factor=1.0,
        attn_factor=float(attn),
        original_context=original or meta.uint("context_length", 0),
    )


def shift_rope(opts: RopeOptions) -> RopeOptions:
    """The options that move RoPE'd keys to other positions: the same rotation without the
    magnitude the keys already carry from when they were stored. That is the file's attention
    factor (Phi-3's long-context files) and, with YaRN, ggml's own (1 + 0.1 ln(1/scale)),
    which it multiplies in whenever ext_factor is set: the factor here is then its inverse (in
    F32, as ggml computes it), as llama.cpp shifts DeepSeek 2 (its shift of other YaRN models,
    and of Phi-3's, scales the keys a second time)."""
    if opts.ext_factor == 0.0:
        return opts if opts.attn_factor == 1.0 else dataclasses.replace(opts, attn_factor=1.0)
    f = np.float32(1.0) / (np.float32(1.0) + np.float32(0.1) * np.log(1 / np.float32(opts.scale)))
    return dataclasses.replace(opts, attn_factor=float(f))


def sliding_layers(meta: Metadata, blocks: int, pattern: int) -> tuple[bool, ...]:
    """Which of `blocks` layers attend through a sliding window, as llama.cpp's
    `load_swa_pattern` decides: `attention.sliding_window_pattern` as one flag per layer, or
    as a period P (default `pattern`): layer i slides unless i % P == P - 1 (P = 0: every
    layer). All False when the file has no `attention.sliding_window`."""
    if meta.uint("attention.sliding_window", 0) == 0:
        return tuple(False for _ in range(blocks))
    raw = meta.raw("attention.sliding_window_pattern")
    if raw is not None and not isinstance(raw, int | float) and len(raw):
        return tuple(bool(x) for x in raw)
    p = int(raw) if raw is not None else pattern
    return tuple(p == 0 or i % p < p - 1 for i in range(blocks))
