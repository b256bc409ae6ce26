"""Qwen3 dense models (GGUF architecture `qwen3`), as llama.cpp's `qwen3.cpp` runs them:
Qwen2's layer without biases, with queries and keys RMS-normed per head before RoPE (the
kit's `NormedAttention`), and head sizes of their own (`attention.key_length`)."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.plugins import (
    Block,
    ConfigDefaults,
    Metadata,
    NormedAttention,
    StandardTransformer,
    TransformerConfig,
    Weights,
    part,
)
from hearth_qwen2 import CHATML

__all__ = ["Config", "Model", "QKNormBlock"]

DEFAULTS = ConfigDefaults(rope_base=1_000_000.0, neox=True, rms_eps=1e-6, context_length=40960)


@dataclass(frozen=True)
class Config(TransformerConfig):
    @classmethod
    def from_gguf(cls, meta: Metadata) -> Config:
        return cls.read(meta, DEFAULTS)


@dataclass
class QKNormBlock(Block):
    attn: NormedAttention = part(NormedAttention)


class Model(StandardTransformer[Config]):
    default_chat_template = CHATML
    eos_tokens = ("<|im_end|>", "<|endoftext|>")

    def __init__(self, config: Config, weights: Weights) -> None:
        super().__init__(config, weights, QKNormBlock)
