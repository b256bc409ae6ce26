"""Llama 2 / 3 / 3.1 / 3.2 and Mistral-style models (GGUF architecture `llama`): the standard
pre-norm transformer, interleaved RoPE, and Llama 3.1's per-frequency `rope_freqs`."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.plugins import ConfigDefaults, Metadata, StandardTransformer, TransformerConfig, Weights

__all__ = ["Config", "Model"]

DEFAULTS = ConfigDefaults(rope_base=10000.0, neox=False, rms_eps=1e-5, context_length=2048)


@dataclass(frozen=True)
class Config(TransformerConfig):
    expert_count: int

    @classmethod
    def from_gguf(cls, meta: Metadata) -> Config:
        return cls.read(meta, DEFAULTS, expert_count=meta.uint("expert_count", 0))


class Model(StandardTransformer[Config]):
    """The llama forward pass (see hearth.plugins for the contract)."""

    eos_tokens = ("<|eot_id|>", "<|eom_id|>")  # llama files carry their own chat template

    def __init__(self, config: Config, weights: Weights) -> None:
        super().__init__(config, weights)
        self.rope_factors = weights.get("rope_freqs.weight", matmul=False)

    def validate(self) -> None:
        if self.config.expert_count > 0:
            raise ValueError("mixture-of-experts llama files (e.g. Mixtral) are not supported yet")
        super().validate()
