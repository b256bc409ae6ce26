"""The built-in dense plugins of issue 34 (qwen2, qwen3, phi3) on tiny random models made by
transformers and converted by llama.cpp's own converter: the conformance suite (parity with
llama.cpp: greedy continuations equal, logits close) and the largest log-probability
difference from llama.cpp on the same file, printed with each plugin's line count."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from convert.chat_models import tiny_chat_gguf
from hearth_phi3 import Config as Phi3Config
from hearth_qwen3 import Config as Qwen3Config

from hearth.engine.forward import ForwardEngine
from hearth.plugins import Metadata
from hearth.plugins.registry import load_installed_model
from hearth.plugins.testing import LLAMACPP_LOGITS, run_conformance, run_oracle, teacher_forced
from hearth.plugins.testing.parity import greedy

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

CASES = {
    "qwen2": ("qwen2", {}),
    "qwen2-tied": ("qwen2", {"tie_word_embeddings": True, "num_key_value_heads": 4}),
    "qwen3": ("qwen3", {}),
    "phi3": ("phi3", {}),
    # Phi-4 mini's shape: longrope factors and RoPE over 3/4 of each head. The parity run's
    # context (512) exceeds the original 256: the long factors.
    "phi3-longrope-long": ("phi3", {"long_rope": 256, "partial_rotary_factor": 0.75}),
    "phi3-longrope-short": ("phi3", {"long_rope": 2048}),  # 512 <= 2048: the short ones
}


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def logprob_parity(path: Path, tmp: Path, n_ctx: int = 512) -> tuple[float, int, int]:
    """(largest |log-probability difference| from llama.cpp over sampled full rows, greedy
    continuations equal, prompts) on random prompts."""
    rng = np.random.default_rng(5)
    prompts = [[1, *rng.integers(3, 400, n - 1).tolist()] for n in (16, 100, 300)]
    request = {"model": str(path), "n_ctx": n_ctx, "threads": 2, "greedy": 12, "sample_rows": 8}
    oracle = run_oracle(LLAMACPP_LOGITS, {**request, "prompts": [{"ids": p} for p in prompts]}, tmp)
    loaded = load_installed_model(path, num_threads=2)
    worst, equal = 0.0, 0
    try:
        engine = ForwardEngine(loaded, num_ctx=n_ctx, num_batch=512)
        try:
            for i in range(len(prompts)):
                tf = teacher_forced(engine, oracle[f"ids_{i}"], oracle[f"rows_idx_{i}"])
                diff = _log_softmax(tf.rows) - _log_softmax(oracle[f"rows_{i}"])
                worst = max(worst, float(np.abs(diff).max()))
                ours = greedy(engine, tf.last, len(oracle[f"ids_{i}"]), 12)
                equal += ours == [int(t) for t in oracle[f"greedy_{i}"]]
        finally:
            engine.close()
    finally:
        loaded.close()
    return worst, equal, len(prompts)


def _lines(plugin: str) -> int:
    return sum(len(f.read_text().splitlines()) for f in (REPO / "plugins" / plugin).glob("*.py"))


@pytest.mark.parametrize("case", CASES)
def test_conforms_and_matches_llama_cpp(case: str, tmp_path: Path) -> None:
    arch, settings = CASES[case]
    path = tiny_chat_gguf(tmp_path, arch, **settings)
    print(run_conformance(path, tmp_path, llama_cpp=True))
    worst, equal, prompts = logprob_parity(path, tmp_path)
    print(f"{case}: greedy {equal}/{prompts}, max |logprob diff| {worst:.2e}, {_lines(arch)} lines")
    assert equal == prompts
    assert worst < 2e-3  # F32 files, the same kernels: rounding only


def test_phi3_chooses_the_rope_factors_by_context_per_sequence(tmp_path: Path) -> None:
    path = tiny_chat_gguf(tmp_path, "phi3", long_rope=256)
    loaded = load_installed_model(path, num_threads=2)
    try:
        model = loaded.model
        short, long = model.factors  # type: ignore[attr-defined]
        assert short is not None and long is not None
        for num_ctx, want in ((256, short), (257, long), (128, short)):
            ForwardEngine(loaded, num_ctx=num_ctx, num_batch=64).close()
            assert model.rope_factors is want, num_ctx
    finally:
        loaded.close()


def test_reads_qwen3_and_phi3_metadata() -> None:
    qwen3 = Qwen3Config.from_gguf(
        Metadata(
            {
                "general.architecture": "qwen3",
                "qwen3.block_count": 28,
                "qwen3.embedding_length": 1024,
                "qwen3.feed_forward_length": 3072,
                "qwen3.attention.head_count": 16,
                "qwen3.attention.head_count_kv": 8,
                "qwen3.attention.key_length": 128,
                "qwen3.attention.value_length": 128,
            }
        )
    )
    assert (qwen3.key_length, qwen3.rope.dims, qwen3.rope.neox) == (128, 128, True)
    assert qwen3.rope.base == 1e6 and qwen3.attention_scale == pytest.approx(128**-0.5)
    phi3 = Phi3Config.from_gguf(
        Metadata(
            {
                "general.architecture": "phi3",
                "phi3.block_count": 32,
                "phi3.embedding_length": 3072,
                "phi3.feed_forward_length": 8192,
                "phi3.attention.head_count": 24,
                "phi3.attention.head_count_kv": 8,
                "phi3.rope.dimension_count": 96,
                "phi3.context_length": 131072,
                "phi3.rope.scaling.original_context_length": 4096,
                "phi3.rope.scaling.attn_factor": 1.19,
            }
        )
    )
    assert (phi3.key_length, phi3.rope.dims, phi3.original_context) == (128, 96, 4096)
    assert phi3.rope.attn_factor == pytest.approx(1.19)
