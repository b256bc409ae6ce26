"""Unit checks of the conversion pieces: a byte-level BPE tokenizer.json converted as
llama.cpp does (tokens and merges Hearth then tokenizes with exactly as the `tokenizers`
library does), and the mllama converter's names as Ollama's Go replacer writes them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hearth.engine.gguf import GGUFFile
from hearth_mllama.convert import ollama_name

from .converted import convert, tokenize
from .hf_models import build_tiny_llama, write_bpe_tokenizer

TEXTS = [
    "The quick brown fox jumps over 12345 dogs.",
    "Hello   world!\n\nNew lines, tabs\t.",
    "é ü",
]


@pytest.mark.parametrize(
    ("hf", "gguf"),
    [
        (
            "language_model.model.layers.1.cross_attn.q_proj.weight",
            "blk.1.cross_attn_q_proj.weight",
        ),
        ("language_model.model.layers.1.cross_attn_attn_gate", "blk.1.cross_attn_attn_gate"),
        ("language_model.model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"),
        ("language_model.lm_head.weight", "output.weight"),
        ("language_model.model.embed_tokens.weight", "token_embd.weight"),
        ("vision_model.gated_positional_embedding.embedding", "v.position_embd.weight"),
        (
            "vision_model.gated_positional_embedding.tile_embedding.weight",
            "v.tile_position_embd.weight",
        ),
        (
            "vision_model.pre_tile_positional_embedding.embedding.weight",
            "v.pre_tile_position_embd.weight",
        ),
        ("vision_model.global_transformer.layers.0.gate_ffn", "v.global.blk.0.ffn_gate"),
        ("vision_model.transformer.layers.3.mlp.fc1.bias", "v.blk.3.ffn_up.bias"),
        ("vision_model.layernorm_pre.weight", "v.pre_ln.weight"),
        ("multi_modal_projector.weight", "mm.0.weight"),
    ],
)
def test_mllama_names_follow_ollamas_replacer(hf, gguf):
    assert ollama_name(hf) == gguf


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("tokenizers")
    spm = build_tiny_llama(tmp_path_factory.mktemp("spm") / "hf")
    folder = tmp_path_factory.mktemp("bpe") / "hf"
    shutil.copytree(spm, folder)
    for name in ("tokenizer.model", "tokenizer_config.json"):
        (folder / name).unlink()
    ids = write_bpe_tokenizer(folder, 398, ("<|begin_of_text|>", "<|end_of_text|>"))
    config = json.loads((folder / "config.json").read_text())
    config.update(bos_token_id=ids["<|begin_of_text|>"], eos_token_id=ids["<|end_of_text|>"])
    (folder / "bos.txt").write_text(str(ids["<|begin_of_text|>"]))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_bpe_tokenizer_json_converts_as_llama_cpp_writes_it(bpe_dir, tmp_path):
    from tokenizers import Tokenizer

    out = convert(bpe_dir, tmp_path / "bpe.gguf")
    with GGUFFile(out) as f:
        meta = f.metadata
        assert meta.raw("tokenizer.ggml.model") == "gpt2"
        assert meta.raw("tokenizer.ggml.pre") == "llama-bpe"
        tokens = list(meta.raw("tokenizer.ggml.tokens"))
        assert len(tokens) == 404 and tokens[403] == "[PAD403]"  # config.json's vocab_size
        bos = int((bpe_dir / "bos.txt").read_text())
        assert tokens[bos] == "<|begin_of_text|>"
        assert meta.raw("tokenizer.ggml.bos_token_id") == bos
    ref = Tokenizer.from_file(str(bpe_dir / "tokenizer.json"))
    for text in TEXTS:
        assert tokenize(out, text)[1:] == ref.encode(text).ids, text
