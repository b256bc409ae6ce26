"""Converting Hugging Face checkpoints (hearth.convert with the built-in converters) against
independent references: transformers' logits and greedy tokens on tiny random models, and
llama.cpp's own convert_hf_to_gguf.py (its file must give Hearth the same logits as ours)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hearth.convert import CheckpointError
from hearth.engine.gguf import GGUFFile
from hearth.plugins import UnsupportedCheckpointError

from .converted import convert, hearth_run, tokenize
from .hf_models import TinyLlama, build_tiny_llama, reference_greedy, reference_logits

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

PROMPTS = ["The quick brown fox jumps", "Hello world! 0123", "A picture is worth many words."]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("llama") / "hf")


@pytest.fixture(scope="module")
def llama_ref(llama_dir: Path) -> Any:
    import torch
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def llama_gguf(llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert(llama_dir, tmp_path_factory.mktemp("llama-out") / "tiny.gguf")


def test_llama_logits_and_greedy_match_transformers(llama_gguf, llama_ref, llama_dir):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(llama_dir / "tokenizer.model"))
    for text in PROMPTS:
        ids = tokenize(llama_gguf, text)
        assert ids == [1, *sp.encode(text)]  # bos, then SentencePiece's own tokens
        logits, ours = hearth_run(llama_gguf, ids)
        diff = float(np.abs(logits - reference_logits(llama_ref, ids)).max())
        theirs = reference_greedy(llama_ref, ids, 8)
        print(f"llama {text!r}: max |diff| {diff:.2e}, greedy {ours}")
        assert diff <= 1e-3
        assert ours == theirs


def test_llama_file_has_llama_cpp_metadata(llama_gguf):
    with GGUFFile(llama_gguf) as f:
        meta = f.metadata
        assert f.architecture == "llama"
        assert meta.raw("tokenizer.ggml.model") == "llama"
        assert len(meta.raw("tokenizer.ggml.tokens")) == TinyLlama().vocab  # padded [PADn]
        assert meta.raw("tokenizer.ggml.bos_token_id") == 1
        assert meta.raw("tokenizer.ggml.add_bos_token") is True
        assert "[assistant]" in str(meta.raw("tokenizer.chat_template"))


@pytest.mark.slow
def test_llama_cpp_converter_gives_the_same_logits_in_hearth(llama_dir, llama_gguf, tmp_path):
    from hearth.plugins.testing import (
        ConverterUnavailableError,
        llamacpp_converter,
        run_llamacpp_converter,
    )

    try:
        tool = llamacpp_converter()
    except ConverterUnavailableError as e:
        pytest.skip(str(e))
    theirs = tmp_path / "llamacpp.gguf"
    run_llamacpp_converter(tool, llama_dir, theirs, mmproj=False)
    for text in PROMPTS:
        ids = tokenize(llama_gguf, text)
        assert tokenize(theirs, text) == ids
        a, ga = hearth_run(llama_gguf, ids)
        b, gb = hearth_run(theirs, ids)
        diff = float(np.abs(a - b).max())
        print(f"ours vs llama.cpp's file {text!r}: max |diff| {diff:.2e}")
        assert diff <= 1e-5
        assert ga == gb


def test_default_output_is_f16_matrices_and_f32_norms(llama_dir, tmp_path):
    out = convert(llama_dir, tmp_path / "f16.gguf", quantize=None)
    with GGUFFile(out) as f:
        types = {name: t.type_name for name, t in f.tensors.items()}
    assert types["blk.0.attn_q.weight"] == "F16"
    assert types["blk.0.attn_norm.weight"] == "F32"


def test_sharded_checkpoint_converts_to_the_same_file(llama_dir, llama_gguf, tmp_path):
    from safetensors.numpy import load_file, save_file

    sharded = tmp_path / "sharded"
    shutil.copytree(llama_dir, sharded)
    (sharded / "model.safetensors").unlink()
    state = load_file(str(llama_dir / "model.safetensors"))
    names = sorted(state)
    halves = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    weight_map = {}
    for shard, part in halves.items():
        save_file({n: state[n] for n in part}, str(sharded / shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in part})
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    out = convert(sharded, tmp_path / "sharded.gguf")
    with GGUFFile(out) as a, GGUFFile(llama_gguf) as b:
        assert sorted(a.tensors) == sorted(b.tensors)
        for name in a.tensors:
            assert np.array_equal(a.tensor_numpy(name), b.tensor_numpy(name)), name
    (sharded / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="lacks weight shard"):
        convert(sharded, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_bf16_checkpoint_matches_transformers(tmp_path):
    import torch
    from transformers import LlamaForCausalLM

    folder = build_tiny_llama(tmp_path / "bf16", dtype="bfloat16")
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
    out = convert(folder, tmp_path / "bf16.gguf")  # BF16 widens exactly to F32
    ref = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = tokenize(out, PROMPTS[0])
    logits, ours = hearth_run(out, ids)
    diff = float(np.abs(logits - reference_logits(ref, ids)).max())
    print(f"bf16 checkpoint: max |diff| {diff:.2e}")
    assert diff <= 1e-3
    assert ours == reference_greedy(ref, ids, 8)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_refusals_are_sentences_and_leave_nothing(llama_dir, tmp_path):
    out = tmp_path / "out.gguf"
    no_config = _copy(llama_dir, tmp_path / "a")
    (no_config / "config.json").unlink()
    with pytest.raises(CheckpointError, match="has no config.json"):
        convert(no_config, out)
    no_weights = _copy(llama_dir, tmp_path / "b")
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="has no weights"):
        convert(no_weights, out)
    no_tokenizer = _copy(llama_dir, tmp_path / "c")
    (no_tokenizer / "tokenizer.model").unlink()
    with pytest.raises(ValueError, match="has no tokenizer"):
        convert(no_tokenizer, out)
    other = _copy(llama_dir, tmp_path / "d")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(
        json.dumps({**config, "architectures": ["MambaForCausalLM"]})
    )
    with pytest.raises(UnsupportedCheckpointError) as err:
        convert(other, out)
    assert "'MambaForCausalLM'" in str(err.value) and "LlamaForCausalLM" in str(err.value)
    wrong = _copy(llama_dir, tmp_path / "e")
    (wrong / "config.json").write_text(json.dumps({**config, "intermediate_size": 96}))
    with pytest.raises(CheckpointError) as err:
        convert(wrong, out)
    assert "mlp.gate_proj.weight' has shape [128, 64]" in str(err.value)
    assert "implies [96, 64]" in str(err.value)
    assert not out.exists()


@pytest.mark.slow
def test_q8_0_equals_llama_cpp_converters_q8_0(llama_dir, tmp_path):
    """--quantize q8_0 through hearth.convert.quantize: the same blocks llama.cpp's converter
    writes with --outtype q8_0 (F32 norms beside), so the same logits in Hearth."""
    import os
    import subprocess
    import sys

    from hearth.plugins.testing import ConverterUnavailableError, llamacpp_converter

    try:
        tool = llamacpp_converter()
    except ConverterUnavailableError as e:
        pytest.skip(str(e))
    ours = convert(llama_dir, tmp_path / "ours.gguf", quantize="q8_0")
    theirs = tmp_path / "theirs.gguf"
    env = dict(os.environ, PYTHONPATH=str(tool / "gguf-py"))
    args = [sys.executable, str(tool / "convert_hf_to_gguf.py"), str(llama_dir)]
    args += ["--outfile", str(theirs), "--outtype", "q8_0"]
    subprocess.run(args, check=True, capture_output=True, env=env)
    with GGUFFile(ours) as a, GGUFFile(theirs) as b:
        assert sorted(a.tensors) == sorted(b.tensors)
        for name, info in a.tensors.items():
            assert info.type_name == b.tensors[name].type_name, name
            assert bytes(a.tensor_bytes(name)) == bytes(b.tensor_bytes(name)), name
