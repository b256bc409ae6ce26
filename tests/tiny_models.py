"""The tiny llama and gemma3 files the tests use, written with the plugin kit's writer
(`hearth.plugins.testing`): real files llama.cpp loads, with random weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gguf import GGMLQuantizationType as QT

from hearth.plugins.testing import TinyTransformer, write_tiny_model

__all__ = ["tiny_llama", "write_tiny_llama", "tiny_gemma3", "write_tiny_gemma3"]


def tiny_llama(**changes: Any) -> TinyTransformer:
    """A tiny llama exercising GQA, Llama 3.1's rope_freqs and mixed storage types."""
    return TinyTransformer("llama", **{"rope_freqs": True, **changes})


def write_tiny_llama(path: str | Path, spec: TinyTransformer | None = None) -> Path:
    return write_tiny_model(path, spec or tiny_llama())


def tiny_gemma3(layers: int = 6, window: int = 16, seed: int = 2) -> TinyTransformer:
    """A tiny gemma3 with a short sliding window (to test past-the-window behaviour)."""
    return TinyTransformer(
        "gemma3",
        embd=64,
        layers=layers,
        heads=2,
        kv_heads=1,
        head_dim=32,
        ff=128,
        context=1024,
        rope_base=1_000_000.0,
        rms_eps=1e-6,
        qk_norm=True,
        post_norms=True,
        tied_output=True,
        seed=seed,
        weight_scale=0.1,
        embedding_scale=0.3,
        default_type=QT.F16,
        types={"token_embd.weight": QT.Q8_0, "attn_k.weight": QT.Q8_0, "ffn_gate.weight": QT.Q8_0},
        metadata={"attention.sliding_window": window},
    )


def write_tiny_gemma3(path: str | Path, layers: int = 6, window: int = 16, seed: int = 2) -> Path:
    return write_tiny_model(path, tiny_gemma3(layers, window, seed))


def byte_token(tokenizer: Any, value: int) -> int:
    """The id of a byte-fallback token (`<0x41>` for 65) in a tokenizer that has them."""
    token = tokenizer.token_id(f"<0x{value:02X}>")
    assert token is not None, f"no byte token for {value}"
    return int(token)
