"""The built-in qwen3moe plugin: conformance and parity with llama.cpp on a tiny random
Qwen3MoeForCausalLM converted by llama.cpp's own convert_hf_to_gguf.py (and quantized by its
quantizer, for the experts' kernel)."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.forward import ForwardEngine
from hearth.engine.gguf import GGUFFile, Metadata
from hearth.engine.input import PassInput
from hearth.engine.ml.ggml_experts import ExpertsKernel
from hearth.plugins.registry import load_installed_model
from hearth.plugins.testing import LLAMACPP_LOGITS, llamacpp_installed, run_conformance, run_oracle
from hearth_qwen3moe.model import Config
from tests.plugins.moe_checkpoints import llamacpp_quantized, tiny_qwen3moe_gguf


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


def _logits(path, passes, experts_kernel: bool = True, reports: list | None = None):
    """Hearth's logits for each pass of `passes` ((ids, positions, sequences), every row's
    logits), one engine with two sequences; `experts_kernel=False`: ggml's mul_mat_id. The
    load's invariance report is added to `reports`."""
    loaded = load_installed_model(path, num_threads=2)
    if reports is not None:
        reports.append(loaded.weights.invariance_report())
    if not experts_kernel:
        loaded.backend.experts_kernel = None
    engine = ForwardEngine(loaded, num_ctx=256, num_batch=128, parallel=2)
    try:
        out = []
        for ids, pos, seq in passes:
            if pos[0] == 0:
                for s in set(seq.tolist()):
                    engine.cache.remove(s, 0)
            out.append(engine.forward(PassInput(ids, pos, seq, np.arange(len(ids)))).copy())
        return out
    finally:
        engine.close()
        loaded.close()


@pytest.mark.slow
@pytest.mark.skipif(not llamacpp_installed(), reason="llama-cpp-python missing")
def test_k_quant_experts_take_hearths_kernel_exactly(tmp_path):
    """A tiny Qwen3-MoE quantized by llama.cpp as Q4_K_M (experts Q4_K, down Q4_K or Q6_K):
    a prompt's expert products go to Hearth's experts' kernel, and the logits are those of
    ggml's mul_mat_id bit for bit, llama.cpp's (plain layouts: the same kernels) to float
    rounding, and a sequence's are the same alone, beside another sequence in one batch, and
    in pieces (a piece with under a row per expert goes to ggml's product)."""
    f16 = tiny_qwen3moe_gguf(tmp_path, width=256, expert_ff=256, experts=16)
    path = llamacpp_quantized(f16, tmp_path / "q4km.gguf", "Q4_K_M")
    with GGUFFile(path) as f:
        types = {n: f.tensors[n].type_name for n in f.tensors if "_exps." in n}
        vocab = f.metadata.uint("vocab_size", 0) or len(f.metadata.get("tokenizer.ggml.tokens"))
    assert {t for n, t in types.items() if "gate" in n or "up" in n} == {"Q4_K"}
    assert {t for n, t in types.items() if "down" in n} <= {"Q4_K", "Q6_K"}

    rng = np.random.default_rng(0)
    a, b = rng.integers(3, vocab, 40), rng.integers(3, vocab, 24)
    n, zeros = len(a), np.zeros(len(a), int)
    alone = (a, np.arange(n), zeros)
    beside = (np.r_[b, a], np.r_[np.arange(len(b)), np.arange(n)], np.r_[zeros[:24] + 1, zeros])
    # The prompt in pieces (as from the cache): 30 rows, 8 (16 expert rows: the kernel's),
    # 2 (4 expert rows: ggml's).
    pieces = [(a[i:j], np.arange(i, j), zeros[i:j]) for i, j in ((0, 30), (30, 38), (38, 40))]
    calls = []
    real = ExpertsKernel.mul_mat_id

    def counted(self, *args):
        calls.append(1)
        return real(self, *args)

    reports: list = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ExpertsKernel, "mul_mat_id", counted)
        ours, mixed, *parts = _logits(path, [alone, beside, *pieces], reports=reports)
    if not calls:
        pytest.skip("Hearth's experts' kernel is not in use on this machine")
    # The load probed the experts' products too, and claims what the checks below find.
    claims = {k: r for k, r in reports[0].products.items() if " experts " in k}
    assert "Q4_K experts (CPU)" in claims and all(r.holds for r in claims.values())
    (ggml_only,) = _logits(path, [alone], experts_kernel=False)
    assert np.array_equal(ours, ggml_only)
    assert np.array_equal(mixed[len(b) :], ours)
    assert np.array_equal(np.concatenate(parts), ours)

    request = {"model": str(path), "n_ctx": 128, "threads": 2, "sample_rows": n, "top_k": 5}
    oracle = run_oracle(LLAMACPP_LOGITS, {**request, "prompts": [{"ids": a.tolist()}]}, tmp_path)
    assert oracle["rows_idx_0"].tolist() == list(range(n))
    np.testing.assert_allclose(ours, oracle["rows_0"], atol=1e-3 * np.abs(ours).max())
    assert (ours.argmax(-1) == oracle["argmax_0"]).all()
