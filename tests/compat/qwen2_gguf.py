"""A tiny random Qwen2 (an architecture no Hearth plugin registers), built with transformers
and converted by llama.cpp's own converter (`convert_hf_to_gguf.py` from llama-cpp-python's
sdist, as `hearth.plugins.testing.llamacpp_convert` fetches it)."""

from __future__ import annotations

import json
from pathlib import Path

from convert.hf_models import randomize, train_spm

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ("<|im_start|>", "<|im_end|>")


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


def build_tiny_qwen2(folder: Path, seed: int = 3) -> Path:
    """A `Qwen2ForCausalLM` folder (2 layers, 64 wide, GQA, q/k/v biases) with a SentencePiece
    tokenizer whose user-defined tokens are ChatML's markers, and a ChatML template."""
    import sentencepiece as spm
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    model_bytes = train_spm(400, user_defined=SPECIALS)
    (folder / "tokenizer.model").write_bytes(model_bytes)
    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    im_end = sp.piece_to_id("<|im_end|>")
    ids = {t: sp.piece_to_id(t) for t in SPECIALS}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(CHATML, ids)))
    config = Qwen2Config(
        vocab_size=404,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        bos_token_id=1,
        eos_token_id=im_end,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).eval()
    randomize(model, seed + 1)
    model.save_pretrained(folder)
    return folder


def tiny_qwen2_gguf(work: Path) -> Path:
    """The tiny Qwen2 as an F32 GGUF written by llama.cpp's converter."""
    from hearth.plugins.testing import llamacpp_converter, run_llamacpp_converter

    out = work / "tiny-qwen2.gguf"
    run_llamacpp_converter(llamacpp_converter(), build_tiny_qwen2(work / "hf"), out, mmproj=False)
    return out
