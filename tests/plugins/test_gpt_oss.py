"""The built-in gpt-oss plugin: conformance and parity with llama.cpp on a tiny random
GptOssForCausalLM converted by llama.cpp's own convert_hf_to_gguf.py (F32 experts), and on
the same file with its experts quantized to MXFP4 by llama.cpp's quantizer."""

from __future__ import annotations

import pytest

from hearth.engine.gguf import GGUFFile
from hearth.plugins.testing import run_conformance
from hearth_gpt_oss.model import Config
from tests.plugins.moe_checkpoints import quantize_mxfp4_moe, tiny_gpt_oss_gguf

MXFP4 = 39


@pytest.mark.slow
def test_conforms_and_matches_llama_cpp(tmp_path):
    path = tiny_gpt_oss_gguf(tmp_path)
    with GGUFFile(path) as f:
        cfg = Config.from_gguf(f.metadata)
        assert "blk.0.attn_sinks.weight" in f.tensors
    assert cfg.sliding_layers == (True, False) and cfg.sliding_window == 16
    assert cfg.routing.gating == "softmax_weight" and cfg.rope.ext_factor == 1.0
    print(run_conformance(path, tmp_path, llama_cpp=True))


@pytest.mark.slow
def test_mxfp4_experts_match_llama_cpp(tmp_path):
    path = quantize_mxfp4_moe(tiny_gpt_oss_gguf(tmp_path), tmp_path / "mxfp4.gguf")
    with GGUFFile(path) as f:
        assert f.tensors["blk.1.ffn_down_exps.weight"].type_id == MXFP4
    print(run_conformance(path, tmp_path, llama_cpp=True, checks=["parity", "sequences"]))
