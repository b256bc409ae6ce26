"""Qwen2 / Qwen2.5 (GGUF architecture `qwen2`), as llama.cpp's `llama_model_qwen2` runs it.

What sets it apart from Llama: biases on the query, key and value projections (the kit's
`Attention` adds them when the file has `blk.N.attn_q.bias`...), RoPE in the NeoX layout
(rotating the two halves of each head), and an output matrix that small models tie to the
token embedding (the kit's `Transformer` falls back to `token_embd.weight`). The layer itself
is the standard pre-norm one: `h += attn(rms_norm(h))`, `h += swiglu_mlp(rms_norm(h))`.
"""

from __future__ import annotations

from dataclasses import dataclass

from hearth.plugins import ConfigDefaults, Metadata, StandardTransformer, TransformerConfig

__all__ = ["Config", "Model"]

# What llama.cpp assumes for keys a qwen2 file leaves out (real files carry them all).
DEFAULTS = ConfigDefaults(rope_base=10000.0, neox=True, rms_eps=1e-6, context_length=32768)

# ChatML, what Qwen2 files normally carry in `tokenizer.chat_template`; used for files without.
CHAT_TEMPLATE = (
    "{%- if not messages or messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)


@dataclass(frozen=True)
class Config(TransformerConfig):
    """Qwen2's hyperparameters are the common ones (`qwen2.block_count`, ...); the defaults
    for absent keys are llama.cpp's."""

    @classmethod
    def from_gguf(cls, meta: Metadata) -> Config:
        return cls.read(meta, DEFAULTS)


class Model(StandardTransformer[Config]):
    """The Qwen2 forward pass: the kit's standard layer over the weights it binds."""

    default_chat_template = CHAT_TEMPLATE
    eos_tokens = ("<|im_end|>", "<|endoftext|>")

    def validate(self) -> None:
        super().validate()  # heads a multiple of the key/value heads
        cfg = self.config
        if cfg.rope.dims != cfg.key_length or cfg.value_length != cfg.key_length:
            raise ValueError("qwen2 needs RoPE over whole heads and equal key and value sizes")
