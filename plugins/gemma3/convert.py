"""Hugging Face Gemma 3 checkpoints -> ONE GGUF `gemma3` file.

* `Gemma3ForCausalLM` (text) and the text part of `Gemma3ForConditionalGeneration`: what
  llama.cpp's `convert_hf_to_gguf.py` writes (the same keys and names; RMSNorm weights + 1,
  since Gemma's norms scale by 1 + w; no q/k permutation, Gemma's RoPE is NeoX-style; the
  token embedding cut to the tokenizer's size). The sliding-window layout is written as
  `gemma3.attention.sliding_window_pattern` (one flag per layer) from `layer_types` when the
  config has it.
* The vision tower of `Gemma3ForConditionalGeneration` in the same file, in Ollama's
  single-file layout (which `vision.py` reads): `v.patch_embedding`, `v.position_embedding`,
  `v.blk.N.{layer_norm1,attn_q,attn_k,attn_v,attn_output,layer_norm2,mlp.fc1,mlp.fc2}`,
  `v.post_layernorm`, `mm.mm_soft_emb_norm` (+ 1), `mm.mm_input_projection` (as stored,
  `[vision, text]`), and the `gemma3.vision.*` / `gemma3.mm.tokens_per_image` keys.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from hearth.plugins import Converter, rope_parameters

__all__ = ["Gemma3Converter"]

_TEXT_LAYER = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_VISION_LAYER = {
    "layer_norm1": "layer_norm1",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.out_proj": "attn_output",
    "layer_norm2": "layer_norm2",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
}
_VISION = {
    "embeddings.patch_embedding": "v.patch_embedding",
    "embeddings.position_embedding": "v.position_embedding",
    "post_layernorm": "v.post_layernorm",
}
_TEXT_PREFIXES = ("model.language_model.", "language_model.model.", "language_model.", "model.")
_LAYER = re.compile(r"layers\.(\d+)\.(.+)\.(weight|bias)$")


class Gemma3Converter(Converter):
    hf_architectures = ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration")
    gguf_architecture = "gemma3"

    @property
    def text(self) -> dict[str, Any]:
        return dict(self.config.get("text_config") or self.config)

    def vocab_size(self) -> int | None:
        size = self.text.get("vocab_size")
        return int(size) if size else None

    def metadata(self) -> dict[str, Any]:
        t = self.text
        head_dim = int(t.get("head_dim", 256))
        rope = rope_parameters(t)
        kv: dict[str, Any] = {
            "gemma3.block_count": int(t["num_hidden_layers"]),
            "gemma3.context_length": int(t.get("max_position_embeddings", 131072)),
            "gemma3.embedding_length": int(t["hidden_size"]),
            "gemma3.feed_forward_length": int(t["intermediate_size"]),
            "gemma3.attention.head_count": int(t.get("num_attention_heads", 8)),
            "gemma3.attention.head_count_kv": int(t.get("num_key_value_heads", 4)),
            "gemma3.attention.layer_norm_rms_epsilon": float(t.get("rms_norm_eps", 1e-6)),
            "gemma3.attention.key_length": head_dim,
            "gemma3.attention.value_length": head_dim,
            "gemma3.rope.freq_base": float(rope.get("rope_theta", 1_000_000.0)),
        }
        local = (t.get("rope_parameters") or {}).get("sliding_attention") or {}
        local_base = local.get("rope_theta", t.get("rope_local_base_freq"))
        if local_base is not None:
            kv["gemma3.rope.freq_base_swa"] = float(local_base)
        if rope.get("rope_type") == "linear" and rope.get("factor") is not None:
            kv["gemma3.rope.scaling.type"] = "linear"
            kv["gemma3.rope.scaling.factor"] = float(rope["factor"])
        if t.get("final_logit_softcapping"):
            kv["gemma3.final_logit_softcapping"] = float(t["final_logit_softcapping"])
        if t.get("sliding_window_pattern") != 1 and t.get("sliding_window"):
            kv["gemma3.attention.sliding_window"] = int(t["sliding_window"])
            if t.get("layer_types"):
                kv["gemma3.attention.sliding_window_pattern"] = [
                    lt == "sliding_attention" for lt in t["layer_types"]
                ]
        v = self.config.get("vision_config")
        if v and "Gemma3ForConditionalGeneration" in self.config.get("architectures", []):
            for key, field in {
                "image_size": "image_size",
                "patch_size": "patch_size",
                "embedding_length": "hidden_size",
                "feed_forward_length": "intermediate_size",
                "block_count": "num_hidden_layers",
                "attention.head_count": "num_attention_heads",
            }.items():
                kv[f"gemma3.vision.{key}"] = int(v[field])
            kv["gemma3.vision.attention.layer_norm_epsilon"] = float(v.get("layer_norm_eps", 1e-6))
            kv["gemma3.vision.num_channels"] = int(v.get("num_channels", 3))
            kv["gemma3.mm.tokens_per_image"] = int(self.config.get("mm_tokens_per_image", 256))
        return kv

    def tensor_name(self, hf_name: str) -> str | None:
        if hf_name.startswith(("vision_tower.", "model.vision_tower.")):
            return self._vision_name(hf_name)
        if hf_name.startswith(("multi_modal_projector.", "model.multi_modal_projector.")):
            if hf_name.endswith("mm_input_projection_weight"):
                return "mm.mm_input_projection.weight"
            if hf_name.endswith("mm_soft_emb_norm.weight"):
                return "mm.mm_soft_emb_norm.weight"
            return None
        if hf_name.endswith("lm_head.weight"):
            return None if self._tied() else "output.weight"
        name = hf_name
        for prefix in _TEXT_PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix) :]
                break
        if name == "embed_tokens.weight":
            return "token_embd.weight"
        if name == "norm.weight":
            return "output_norm.weight"
        m = _LAYER.match(name)
        if m and m.group(2) in _TEXT_LAYER:
            return f"blk.{m.group(1)}.{_TEXT_LAYER[m.group(2)]}.{m.group(3)}"
        return None

    def _tied(self) -> bool:
        return bool(
            self.text.get("tie_word_embeddings", self.config.get("tie_word_embeddings", True))
        )

    def _vision_name(self, hf_name: str) -> str | None:
        name = re.sub(r"^(model\.)?vision_tower\.(vision_model\.)?", "", hf_name)
        stem, _, kind = name.rpartition(".")
        if stem in _VISION:
            return f"{_VISION[stem]}.{kind}"
        m = re.match(r"encoder\.layers\.(\d+)\.(.+)\.(weight|bias)$", name)
        if m and m.group(2) in _VISION_LAYER:
            return f"v.blk.{m.group(1)}.{_VISION_LAYER[m.group(2)]}.{m.group(3)}"
        return None  # the SigLIP head, which Gemma 3 does not use

    def output_shape(self, gguf_name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        if gguf_name == "token_embd.weight" and self.n_tokens is not None:
            return (min(shape[0], self.n_tokens), *shape[1:])
        return shape

    def transform(self, gguf_name: str, array: np.ndarray) -> np.ndarray:
        if gguf_name == "token_embd.weight":
            return array[: self.output_shape(gguf_name, array.shape)[0]]
        text_norm = not gguf_name.startswith(("v.", "mm.")) and gguf_name.endswith("norm.weight")
        if text_norm or gguf_name == "mm.mm_soft_emb_norm.weight":
            return array + np.float32(1.0)
        return array

    def keep_f32(self, gguf_name: str, shape: tuple[int, ...]) -> bool:
        return len(shape) <= 1 or gguf_name in (
            "v.patch_embedding.weight",
            "v.position_embedding.weight",
        )

    def tokenizer_keys(self, model: str) -> dict[str, Any]:
        return {"tokenizer.ggml.add_space_prefix": False} if model == "llama" else {}
