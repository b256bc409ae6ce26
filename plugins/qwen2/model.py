"""Qwen2 / Qwen2.5 and the DeepSeek-R1 distills (GGUF architecture `qwen2`), as llama.cpp's
`qwen2.cpp` runs them: Llama's pre-norm layer with biases on the q, k and v projections (the
kit's `Attention` binds them when present), NeoX RoPE, and small models' output tied to the
token embedding (the kit's `Transformer` falls back to `token_embd.weight`)."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.plugins import ConfigDefaults, Metadata, StandardTransformer, TransformerConfig

__all__ = ["CHATML", "DEFAULTS", "Config", "Model"]

DEFAULTS = ConfigDefaults(rope_base=10000.0, neox=True, rms_eps=1e-6, context_length=32768)

# ChatML, what Qwen files carry in `tokenizer.chat_template`; for files without one.
CHATML = (
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
    @classmethod
    def from_gguf(cls, meta: Metadata) -> Config:
        return cls.read(meta, DEFAULTS)


class Model(StandardTransformer[Config]):
    default_chat_template = CHATML
    eos_tokens = ("<|im_end|>", "<|endoftext|>")
