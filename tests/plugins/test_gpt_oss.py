"""The built-in gpt-oss plugin: conformance and parity with llama.cpp on a tiny random
GptOssForCausalLM converted by llama.cpp's own convert_hf_to_gguf.py (F32 experts), and on
the same file with its experts quantized to MXFP4 by llama.cpp's quantizer."""

from __future__ import annotations

import pytest

from hearth.engine.gguf import GGUFFile
from hearth.plugins.testing import run_conformance
from hearth_gpt_oss.model import Config
from tests.plugins.moe_checkpoints import mxfp4_experts, quantize_mxfp4_moe, tiny_gpt_oss_gguf

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
def test_mxfp4_experts_conform_and_match_llama_cpp(tmp_path):
    """The experts in MXFP4 (gguf-py's quantizer), the rest F32: every check."""
    path = mxfp4_experts(tiny_gpt_oss_gguf(tmp_path), tmp_path / "mxfp4.gguf")
    with GGUFFile(path) as f:
        assert f.tensors["blk.1.ffn_down_exps.weight"].type_id == MXFP4
    print(run_conformance(path, tmp_path, llama_cpp=True))


@pytest.mark.slow
def test_llama_cpps_mxfp4_moe_file_matches_llama_cpp(tmp_path):
    """As llama.cpp's quantizer writes gpt-oss (MXFP4_MOE: experts MXFP4, the rest Q8_0).
    Not the batch check: one batch vs token by token differs by 0.15 of max |logit| on this
    file (all F32 but the experts: 0.003), where a Q8_0 product of one row rounds otherwise
    than a batch's (0.015 on the tiny llama); a router near a tie picking another expert would
    explain the jump (not proved)."""
    path = quantize_mxfp4_moe(tiny_gpt_oss_gguf(tmp_path), tmp_path / "mxfp4-moe.gguf")
    with GGUFFile(path) as f:
        assert f.tensors["blk.1.ffn_down_exps.weight"].type_id == MXFP4
    checks = ["parity", "sequences", "shift", "cache_reuse"]
    print(run_conformance(path, tmp_path, llama_cpp=True, checks=checks))
