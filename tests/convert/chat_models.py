"""Tiny random chat models of several architectures, built with transformers (random
weights, a SentencePiece tokenizer whose ChatML markers are special tokens) and converted by
llama.cpp's own converter (`convert_hf_to_gguf.py` from llama-cpp-python's sdist, as
`hearth.plugins.testing.llamacpp_convert` fetches it): files both engines load, made by an
independent tool.

`tiny_chat_gguf(work, "qwen3")` is the F32 GGUF; `build_tiny_chat(folder, "qwen3")` the
Hugging Face folder. Architectures: qwen2 (q/k/v biases), qwen3 (per-head q/k norms, head
size of its own), phi3 (fused projections; `long_rope`: longrope factors), granite
(multipliers; the example third-party plugin's), ernie4_5 (an architecture Hearth has no
plugin for: the llama.cpp engine's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from convert.hf_models import randomize, train_spm

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ("<|im_start|>", "<|im_end|>")
# llama.cpp sets attributes of these by name in a file named like the architecture (phi3).
MORE_SPECIALS = {"phi3": ("<|endoftext|>",)}

_COMMON: dict[str, Any] = {
    "vocab_size": 404,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-6,
    "bos_token_id": 1,
    "tie_word_embeddings": False,
}
# architecture -> (transformers config class, model class, settings beyond _COMMON)
ARCHITECTURES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"rope_theta": 10000.0}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 32, "rope_theta": 1e6}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"rms_norm_eps": 1e-5, "pad_token_id": 0}),
    "ernie4_5": ("Ernie4_5Config", "Ernie4_5ForCausalLM", {"pad_token_id": 0}),
    "granite": (
        "GraniteConfig",
        "GraniteForCausalLM",
        {"embedding_multiplier": 4.0, "residual_multiplier": 0.5, "logits_scaling": 2.0},
    ),
}


def tokenizer_config(chat_template: str, specials: dict[str, int]) -> dict[str, object]:
    """`tokenizer_config.json` of a SentencePiece tokenizer with ChatML's end of turn as EOS
    and `specials` (piece -> id) marked special: llama.cpp's converter then makes them control
    tokens, one token each in a prompt (plain user-defined pieces are split), as in real
    Qwen files."""
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "eos_token": "<|im_end|>",
        "unk_token": "<unk>",
        "chat_template": chat_template,
        "tokenizer_class": "LlamaTokenizer",
        "added_tokens_decoder": {
            str(i): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for t, i in specials.items()
        },
    }


def phi3_long_rope(head_dim: int, rotary: float, original: int) -> dict[str, Any]:
    """Phi-3's longrope settings (distinct short and long factors per frequency)."""
    half = int(head_dim * rotary) // 2
    return {
        "rope_type": "longrope",
        "short_factor": [1.0 + 0.05 * i for i in range(half)],
        "long_factor": [1.5 + 0.5 * i for i in range(half)],
        "original_max_position_embeddings": original,
        "rope_theta": 10000.0,
        "partial_rotary_factor": rotary,
    }


def build_tiny_chat(
    folder: Path, architecture: str, seed: int = 3, long_rope: int = 0, **settings: Any
) -> Path:
    """A `<Arch>ForCausalLM` folder (2 layers, 64 wide, GQA) with the SentencePiece tokenizer
    and ChatML. `long_rope` (phi3): the original context of longrope factors (0: none).
    `settings` override the config's."""
    import sentencepiece as spm
    import torch
    import transformers

    config_name, model_name, own = ARCHITECTURES[architecture]
    folder.mkdir(parents=True, exist_ok=True)
    specials = SPECIALS + MORE_SPECIALS.get(architecture, ())
    model_bytes = train_spm(400, user_defined=specials)
    (folder / "tokenizer.model").write_bytes(model_bytes)
    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    ids = {t: sp.piece_to_id(t) for t in specials}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(CHATML, ids)))
    values = {**_COMMON, **own, "eos_token_id": ids["<|im_end|>"], **settings}
    if long_rope:
        heads = values["hidden_size"] // values["num_attention_heads"]
        rotary = values.pop("partial_rotary_factor", 1.0)
        values["rope_parameters"] = phi3_long_rope(heads, rotary, long_rope)
        values["original_max_position_embeddings"] = long_rope
    config = getattr(transformers, config_name)(**values)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).eval()
    randomize(model, seed + 1)
    model.save_pretrained(folder)
    return folder


def tiny_chat_gguf(work: Path, architecture: str, seed: int = 3, **settings: Any) -> Path:
    """The tiny model as an F32 GGUF written by llama.cpp's converter."""
    from hearth.plugins.testing import llamacpp_converter, run_llamacpp_converter

    out = work / f"tiny-{architecture}-{seed}.gguf"
    hf = build_tiny_chat(work / f"hf-{architecture}-{seed}", architecture, seed, **settings)
    run_llamacpp_converter(llamacpp_converter(), hf, out, mmproj=False)
    return out
