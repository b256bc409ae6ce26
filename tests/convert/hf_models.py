"""Tiny random Hugging Face checkpoints built by the tests (transformers, torch CPU,
sentencepiece), and transformers' answers on them: the independent reference for conversion."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SPM_TEXT = """The quick brown fox jumps over the lazy dog. A picture is worth many words.
Hello world! 0123456789 tokens, vocabularies, models and converters.
The model reads the folder and writes one file: weights, tokenizer and template.
"""

LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)


@dataclass(frozen=True)
class TinyLlama:
    spm_vocab: int = 400
    vocab: int = 404  # padded past the SentencePiece pieces, as real checkpoints often are
    embd: int = 64
    ffn: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    seed: int = 0


def train_spm(vocab: int, user_defined: tuple[str, ...] = ()) -> bytes:
    """A small SentencePiece BPE model: <unk> 0, <s> 1, </s> 2, byte fallback."""
    import sentencepiece as spm

    buf = io.BytesIO()
    lines = [s for s in SPM_TEXT.replace("\n", " ").split(". ") if s] * 20
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        vocab_size=vocab,
        model_type="bpe",
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        user_defined_symbols=list(user_defined),
        byte_fallback=True,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    return buf.getvalue()


def randomize(model: Any, seed: int) -> None:
    """Random weights with norms around 1 (so that norm weights matter)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p[0].numel() ** 0.5)


def build_tiny_llama(folder: Path, spec: TinyLlama = TinyLlama(), dtype: str = "float32") -> Path:
    """A `LlamaForCausalLM` checkpoint folder with a SentencePiece tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.model").write_bytes(train_spm(spec.spm_vocab))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "add_bos_token": True,
                "add_eos_token": False,
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "chat_template": LLAMA_TEMPLATE,
                "tokenizer_class": "LlamaTokenizer",
            }
        )
    )
    config = LlamaConfig(
        vocab_size=spec.vocab,
        hidden_size=spec.embd,
        intermediate_size=spec.ffn,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(config).eval()
    randomize(model, spec.seed + 1)
    model.to(getattr(torch, dtype)).save_pretrained(folder)
    return folder


def reference_logits(model: Any, ids: list[int]) -> np.ndarray:
    """transformers' logits `[n, vocab]` for `ids` (F32)."""
    import torch

    with torch.no_grad():
        return np.asarray(model(torch.tensor([ids])).logits[0].float().numpy())


def reference_greedy(model: Any, ids: list[int], n: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)
    return [int(t) for t in out[0, len(ids) :]]


def write_bpe_tokenizer(
    folder: Path, vocab: int, specials: tuple[str, ...] = (), chat_template: str | None = None
) -> dict[str, int]:
    """A byte-level BPE `tokenizer.json` with Llama 3's pre-tokenizer regex, trained on a
    short text to at most `vocab` ids, then `specials` as added special tokens (the next ids);
    tokenizer_config.json names the first two as bos and eos. Returns the specials' ids."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    split = pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([SPM_TEXT] * 10, trainer)
    size = tok.get_vocab_size()  # at most `vocab`: the short text may not give more merges
    tok.add_special_tokens(list(specials))
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    ids = {s: size + i for i, s in enumerate(specials)}
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if len(specials) >= 2:
        config.update(bos_token=specials[0], eos_token=specials[1], add_bos_token=True)
    if chat_template:
        config["chat_template"] = chat_template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return ids


LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
