"""The built-in qwen3moe plugin: conformance and parity with llama.cpp on a tiny random
Qwen3MoeForCausalLM converted by llama.cpp's own convert_hf_to_gguf.py."""

from __future__ import annotations

import pytest

from hearth.engine.gguf import GGUFFile, Metadata
from hearth.plugins.testing import run_conformance
from hearth_qwen3moe.model import Config
from tests.plugins.moe_checkpoints import tiny_qwen3moe_gguf


@pytest.mark.slow
def test_conforms_and_matches_llama_cpp(tmp_path):
    path = tiny_qwen3moe_gguf(tmp_path)
    with GGUFFile(path) as f:
        assert f.tensors["blk.0.ffn_gate_exps.weight"].shape == (64, 32, 8)  # ggml order
    print(run_conformance(path, tmp_path, llama_cpp=True))


def test_config_reads_the_experts_and_renormalises_by_default():
    meta = Metadata(
        {
            "general.architecture": "qwen3moe",
            "qwen3moe.block_count": 48,
            "qwen3moe.embedding_length": 2048,
            "qwen3moe.feed_forward_length": 6144,
            "qwen3moe.expert_feed_forward_length": 768,
            "qwen3moe.attention.head_count": 32,
            "qwen3moe.attention.head_count_kv": 4,
            "qwen3moe.attention.key_length": 128,
            "qwen3moe.expert_count": 128,
            "qwen3moe.expert_used_count": 8,
        }
    )
    cfg = Config.from_gguf(meta)
    assert (cfg.routing.count, cfg.routing.used, cfg.routing.normalize) == (128, 8, True)
    assert cfg.routing.gating == "softmax" and cfg.expert_feed_forward_length == 768
    assert cfg.key_length == 128 and cfg.rope.neox
