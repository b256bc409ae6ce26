"""Hugging Face `LlamaForCausalLM` checkpoints -> GGUF `llama` files, as llama.cpp's
`convert_hf_to_gguf.py` writes them: the same keys, names, and q/k rows permuted for ggml's
interleaved RoPE (which this plugin's forward pass uses)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from hearth.plugins import (
    Converter,
    llama3_rope_factors,
    llama_text_metadata,
    permute_rope_rows,
    rope_parameters,
)

__all__ = ["LLAMA_LAYER_NAMES", "LlamaConverter"]

LLAMA_LAYER_NAMES = {  # Hugging Face name within model.layers.N -> GGUF name within blk.N
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_GLOBAL = {
    "model.embed_tokens": "token_embd",
    "model.norm": "output_norm",
    "lm_head": "output",
}
_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)$")


class LlamaConverter(Converter):
    hf_architectures = ("LlamaForCausalLM",)
    gguf_architecture = "llama"

    @property
    def heads(self) -> int:
        return int(self.hparam("num_attention_heads"))

    @property
    def kv_heads(self) -> int:
        return int(self.hparam("num_key_value_heads", default=self.heads))

    @property
    def head_dim(self) -> int:
        return int(self.hparam("head_dim") or self.hparam("hidden_size") // self.heads)

    def metadata(self) -> dict[str, Any]:
        return llama_text_metadata("llama", self)

    def tensor_name(self, hf_name: str) -> str | None:
        stem, _, kind = hf_name.rpartition(".")
        if stem in _GLOBAL:
            if stem == "lm_head" and self.config.get("tie_word_embeddings"):
                return None  # the output reuses token_embd
            return f"{_GLOBAL[stem]}.{kind}"
        m = _LAYER.match(hf_name)
        if m and m.group(2) in LLAMA_LAYER_NAMES:
            return f"blk.{m.group(1)}.{LLAMA_LAYER_NAMES[m.group(2)]}.{m.group(3)}"
        return None  # rotary_emb.inv_freq and anything else the forward pass does not use

    def transform(self, gguf_name: str, array: np.ndarray) -> np.ndarray:
        if gguf_name.endswith(".attn_q.weight") or gguf_name.endswith(".attn_q.bias"):
            return permute_rope_rows(array, self.heads)
        if gguf_name.endswith(".attn_k.weight") or gguf_name.endswith(".attn_k.bias"):
            return permute_rope_rows(array, self.kv_heads)
        return array

    def extra_tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        factors = llama3_rope_factors(rope_parameters(self.config), self.head_dim)
        if factors is not None:
            yield "rope_freqs.weight", factors

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        embd, ffn = int(self.hparam("hidden_size")), int(self.hparam("intermediate_size"))
        vocab = int(self.hparam("vocab_size"))
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        shapes: dict[str, tuple[int, ...]] = {
            "token_embd.weight": (vocab, embd),
            "output_norm.weight": (embd,),
        }
        if not self.config.get("tie_word_embeddings"):
            shapes["output.weight"] = (vocab, embd)
        for i in range(int(self.hparam("num_hidden_layers"))):
            layer = {
                "attn_norm": (embd,),
                "attn_q": (q, embd),
                "attn_k": (kv, embd),
                "attn_v": (kv, embd),
                "attn_output": (embd, q),
                "ffn_norm": (embd,),
                "ffn_gate": (ffn, embd),
                "ffn_up": (ffn, embd),
                "ffn_down": (embd, ffn),
            }
            shapes.update({f"blk.{i}.{k}.weight": v for k, v in layer.items()})
        return shapes
