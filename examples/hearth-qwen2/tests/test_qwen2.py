"""The plugin's own tests: Hearth's conformance suite on tiny random Qwen2 files, which
compares this plugin with llama.cpp (llama-cpp-python is a test dependency). Run them with
the plugin installed in Hearth's environment (`pip install -e .`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hearth.plugins import Metadata
from hearth.plugins.testing import TinyTransformer, default_registry, run_conformance
from hearth_qwen2 import Config

TINY_QWEN2 = TinyTransformer("qwen2", rope_base=1_000_000.0, rms_eps=1e-6, qkv_bias=True)


def test_hearth_finds_the_installed_plugin() -> None:
    assert default_registry().owner("qwen2") == "qwen2"  # the entry point's name


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_conforms_and_matches_llama_cpp(tmp_path, tied: bool) -> None:
    print(run_conformance(replace(TINY_QWEN2, tied_output=tied), tmp_path, llama_cpp=True))


def test_reads_qwen2_metadata() -> None:
    meta = Metadata(
        {
            "general.architecture": "qwen2",
            "qwen2.block_count": 24,
            "qwen2.embedding_length": 896,
            "qwen2.feed_forward_length": 4864,
            "qwen2.attention.head_count": 14,
            "qwen2.attention.head_count_kv": 2,
            "qwen2.rope.freq_base": 1_000_000.0,
            "qwen2.attention.layer_norm_rms_epsilon": 1e-6,
        }
    )
    cfg = Config.from_gguf(meta)
    assert (cfg.key_length, cfg.head_count_kv, cfg.rope.dims) == (64, 2, 64)
    assert cfg.rope.neox and cfg.rope.base == 1_000_000.0 and cfg.context_length == 32768
