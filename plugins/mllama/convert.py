"""Hugging Face `MllamaForConditionalGeneration` checkpoints (Llama 3.2 Vision) -> ONE GGUF
`mllama` file holding the text model and the vision tower, as Ollama's converter writes it
(convert_mllama.go and convert_llama.go before Ollama removed its own engine):

* names: Ollama's replacement list applied the way Go's `strings.Replacer` does (leftmost
  match, the earliest pair in the list winning at a position): `language_model.model.layers`
  -> `blk`, `cross_attn.` -> `cross_attn_`, `vision_model` -> `v`,
  `gated_positional_embedding.embedding` -> `position_embd.weight`, `multi_modal_projector`
  -> `mm.0`, ...;
* q/k rows permuted for ggml's interleaved RoPE (llama.cpp's permutation) in the text
  self-attention, the text cross-attention and the vision tower (heads: text heads / KV heads,
  vision `attention_heads`). The cross-attention `q_norm`/`k_norm` weights (one per head
  dimension) stay as the checkpoint has them, as Ollama writes them (its repack matches the
  `attn_q_proj`/`attn_k_proj` suffixes only); the model (`model.py`) permutes them in its
  graph to the rows they scale;
* vision gates stored as Ollama's engine uses them: `tanh(gate)` for the pre/post tile
  position gates and the global layers' `attn_gate`/`ffn_gate`; the position-embedding gate
  written twice, `v.position_embd.gate` = 1 - tanh(gate) and `v.tile_position_embd.gate` =
  tanh(gate). The text model's cross-attention gates stay raw (its forward pass takes tanh);
* the token embedding as the checkpoint has it (text `vocab_size` + 8 rows);
* keys: the llama text keys under `mllama.*`, `mllama.attention.cross_attention_layers`,
  `mllama.vision.*`; Llama 3.1-style RoPE scaling as `rope_freqs.weight`;
* F32 for 1-D tensors and the four position embeddings, as Ollama's converter keeps them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from hearth.plugins import (
    Converter,
    RegisterConverter,
    hookimpl,
    llama3_rope_factors,
    llama_text_metadata,
    permute_rope_rows,
    rope_parameters,
)

__all__ = ["MllamaConverter", "ollama_name", "register_converters"]

_LLAMA = [
    ("lm_head", "output"),
    ("model.embed_tokens", "token_embd"),
    ("model.norm", "output_norm"),
    ("model.layers", "blk"),
    ("input_layernorm", "attn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.down_proj", "ffn_down"),
    ("mlp.up_proj", "ffn_up"),
    ("post_attention_layernorm", "ffn_norm"),
]
_MLLAMA = [
    ("language_model.", ""),
    ("gate_attn", "attn_gate"),
    ("gate_ffn", "ffn_gate"),
    ("cross_attn.", "cross_attn_"),
    ("vision_model", "v"),
    ("class_embedding", "class_embd"),
    ("patch_embedding", "patch_embd"),
    ("gated_positional_embedding.tile_embedding", "tile_position_embd"),
    ("gated_positional_embedding.embedding", "position_embd.weight"),
    ("gated_positional_embedding", "position_embd"),
    ("embedding.weight", "weight"),
    ("pre_tile_positional_embedding", "pre_tile_position_embd"),
    ("post_tile_positional_embedding", "post_tile_position_embd"),
    ("layernorm_pre", "pre_ln"),
    ("layernorm_post", "post_ln"),
    ("global_transformer.layers", "global.blk"),
    ("transformer.layers", "blk"),
    ("mlp.fc1", "ffn_up"),
    ("mlp.fc2", "ffn_down"),
    ("multi_modal_projector", "mm.0"),
]
_REPLACEMENTS = _LLAMA + _MLLAMA
_F32 = {
    "v.position_embd.weight",
    "v.tile_position_embd.weight",
    "v.pre_tile_position_embd.weight",
    "v.post_tile_position_embd.weight",
}
_TANH_GATES = ("v.pre_tile_position_embd.gate", "v.post_tile_position_embd.gate")


def ollama_name(hf_name: str) -> str:
    """`hf_name` through Ollama's mllama replacement list, as Go's strings.Replacer applies
    it: scanning left to right, at each position the first pair (in list order) whose old
    text starts there is replaced and the scan continues after it."""
    out: list[str] = []
    i = 0
    while i < len(hf_name):
        for old, new in _REPLACEMENTS:
            if hf_name.startswith(old, i):
                out.append(new)
                i += len(old)
                break
        else:
            out.append(hf_name[i])
            i += 1
    return "".join(out)


class MllamaConverter(Converter):
    hf_architectures = ("MllamaForConditionalGeneration",)
    gguf_architecture = "mllama"

    @property
    def text(self) -> dict[str, Any]:
        return dict(self.config.get("text_config") or {})

    @property
    def vision(self) -> dict[str, Any]:
        return dict(self.config.get("vision_config") or {})

    def _heads(self) -> tuple[int, int]:
        heads = int(self.text["num_attention_heads"])
        return heads, int(self.text.get("num_key_value_heads") or heads)

    def vocab_size(self) -> int | None:
        size = self.text.get("vocab_size")
        return int(size) if size else None

    def metadata(self) -> dict[str, Any]:
        kv = llama_text_metadata("mllama", self)
        kv["mllama.attention.cross_attention_layers"] = [
            int(i) for i in self.text.get("cross_attention_layers") or []
        ]
        return kv | self.vision_metadata()

    def vision_metadata(self) -> dict[str, Any]:
        """The `mllama.vision.*` keys (from `vision_config` alone)."""
        vision = self.vision
        kv: dict[str, Any] = {}
        keys = {
            "block_count": "num_hidden_layers",
            "global.block_count": "num_global_layers",
            "embedding_length": "hidden_size",
            "feed_forward_length": "intermediate_size",
            "attention.head_count": "attention_heads",
            "image_size": "image_size",
            "patch_size": "patch_size",
            "max_num_tiles": "max_num_tiles",
            "num_channels": "num_channels",
        }
        for key, field in keys.items():
            kv[f"mllama.vision.{key}"] = int(vision[field])
        kv["mllama.vision.intermediate_layers_indices"] = [
            int(i) for i in vision.get("intermediate_layers_indices") or []
        ]
        kv["mllama.vision.attention.layer_norm_epsilon"] = float(vision.get("norm_eps", 1e-5))
        return kv

    def tensor_name(self, hf_name: str) -> str | None:
        if hf_name.endswith("rotary_emb.inv_freq"):
            return None
        return ollama_name(hf_name)

    def tensor_names(self, hf_name: str) -> tuple[str, ...]:
        name = self.tensor_name(hf_name)
        if name == "v.position_embd.gate":
            return ("v.position_embd.gate", "v.tile_position_embd.gate")
        return () if name is None else (name,)

    def transform(self, gguf_name: str, array: np.ndarray) -> np.ndarray:
        """The repacks (module docstring); an encoder tensor (`v.*`, `mm.*`) needs
        `vision_config` alone."""
        if gguf_name.startswith(("v.", "mm.")):
            if gguf_name.endswith(("attn_q.weight", "attn_k.weight")):
                return permute_rope_rows(array, int(self.vision["attention_heads"]))
            if gguf_name == "v.position_embd.gate":
                return np.asarray(1.0 - np.tanh(array), dtype=np.float32)
            if (
                gguf_name in _TANH_GATES
                or gguf_name == "v.tile_position_embd.gate"
                or gguf_name.endswith(("attn_gate", "ffn_gate"))
            ):
                return np.asarray(np.tanh(array), dtype=np.float32)
            return array
        heads, kv_heads = self._heads()
        if gguf_name.endswith(("attn_q.weight", "attn_q_proj.weight")):
            return permute_rope_rows(array, heads)
        if gguf_name.endswith(("attn_k.weight", "attn_k_proj.weight")):
            return permute_rope_rows(array, kv_heads)
        return array

    def keep_f32(self, gguf_name: str, shape: tuple[int, ...]) -> bool:
        return len(shape) <= 1 or gguf_name in _F32

    def extra_tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        text = self.text
        heads = int(text["num_attention_heads"])
        head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
        factors = llama3_rope_factors(rope_parameters(text), head_dim)
        if factors is not None:
            yield "rope_freqs.weight", factors


@hookimpl
def register_converters(register: RegisterConverter) -> None:
    """The plugin's converter hook (re-exported by the package's __init__)."""
    register(MllamaConverter)
