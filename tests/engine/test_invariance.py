"""Batch invariance on the CPU these tests run on, checked directly rather than trusted.

The engine probes ggml's kernels at load (hearth.engine.ml.invariance) and routes products
and attention so that a sequence's numbers never depend on what shares its batch. These tests
do not reuse the probes' verdicts as evidence: they compute, through the engine's own ops and
with the engine's routing, what a sequence gets in mixed batches and alone, and require the
bits to be equal wherever the load report claims invariance. Where the report says the claim
does not hold for a type, the test requires the report to name it (so a CPU where the claim
is false fails here unless the product says so).
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from hearth.engine.gguf import GGUFFile
from hearth.engine.ml import DType
from hearth.engine.ml.ggml import GGMLBackend
from hearth.engine.ml.invariance import ProductRule
from hearth.engine.ml.weights import WeightStore

K, M = 512, 64
# Runs of rows belonging to one sequence each: a prompt piece, lone decode rows, short pieces.
RUNS = [(0, 5), (5, 1), (6, 1), (7, 3), (10, 2), (12, 1)]
ROWS = 13


def _fp16_fields(blocks: np.ndarray, offsets: list[int], rng: np.random.Generator) -> None:
    """Overwrite the fp16 scale fields at byte `offsets` of every block with sane values."""
    for off in offsets:
        scale = rng.uniform(1e-3, 5e-2, len(blocks)).astype(np.float16).view(np.uint8)
        blocks[:, off : off + 2] = scale.reshape(-1, 2)


# K-quant block layouts (bytes per 256 weights, offsets of their fp16 scales), as ggml's.
_K_BLOCKS = {
    QT.Q2_K: (84, [80, 82]),
    QT.Q3_K: (110, [108]),
    QT.Q4_K: (144, [0, 2]),
    QT.Q5_K: (176, [0, 2]),
    QT.Q6_K: (210, [208]),
}
TYPES = [QT.F32, QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, *_K_BLOCKS]


def _weights(qtype: QT, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((M, K)).astype(np.float32)
    if qtype in _K_BLOCKS:
        size, offsets = _K_BLOCKS[qtype]
        blocks = rng.integers(0, 256, (M * K // 256, size), dtype=np.uint8)
        _fp16_fields(blocks, offsets, rng)
        return blocks.reshape(M, -1)
    if qtype == QT.F32:
        return x
    if qtype == QT.F16:
        return x.astype(np.float16)
    return gguf.quants.quantize(x, qtype)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A file with one weight matrix of every type, loaded as the engine loads models."""
    path = tmp_path_factory.mktemp("invariance") / "types.gguf"
    writer = gguf.GGUFWriter(str(path), "invariance-test")
    rng = np.random.default_rng(11)
    for qtype in TYPES:
        data = _weights(qtype, rng)
        raw = None if qtype in (QT.F32, QT.F16) else qtype
        writer.add_tensor(f"w.{qtype.name}", data, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    backend = GGMLBackend(num_threads=2)
    file = GGUFFile(path)
    weights = WeightStore(backend, file)
    tensors = {qtype: weights.require(f"w.{qtype.name}", matmul=True) for qtype in TYPES}
    weights.load()
    yield backend, weights, tensors
    weights.close()
    backend.close()
    file.close()


def _rows(backend, weight, x: np.ndarray, runs) -> np.ndarray:
    """weight · x through the engine's mul_mat, with `runs` as the batch's sequences."""
    ctx = backend.new_context()
    try:
        ctx.row_groups = {len(x): runs}
        out = ctx.mul_mat(weight, ctx.input(DType.F32, [K, len(x)], x))
        ctx.compute(out)
        return out.numpy().reshape(len(x), -1).copy()
    finally:
        ctx.close()


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_a_sequences_rows_do_not_depend_on_what_shares_the_batch(store, qtype):
    backend, weights, tensors = store
    weight = tensors[qtype]
    x = np.random.default_rng(int(qtype)).standard_normal((ROWS, K)).astype(np.float32)
    batch = _rows(backend, weight, x, RUNS)
    report = weights.invariance_report()
    claimed = [k for k in report.products if k.startswith(f"{qtype.name} (")]
    assert claimed, f"the load report does not mention {qtype.name}"
    rule = report.products[claimed[0]]
    mismatches = []
    for start, count in RUNS:
        alone = _rows(backend, weight, x[start : start + count], [(0, count)])
        if not np.array_equal(batch[start : start + count], alone):
            mismatches.append(f"run at {start} alone")
        if count >= 4:  # the same prompt rows evaluated in two pieces of at least two rows
            first = _rows(backend, weight, x[start : start + 2], [(0, 2)])
            rest = _rows(backend, weight, x[start + 2 : start + count], [(0, count - 2)])
            if not np.array_equal(batch[start : start + count], np.concatenate([first, rest])):
                mismatches.append(f"run at {start} in two pieces")
    if rule.holds:
        assert not mismatches, f"{qtype.name} is reported batch-invariant but {mismatches}"
        assert report.holds or not all(r.holds for r in report.products.values())
    else:  # the claim is withdrawn, and the report says so in words
        assert qtype.name in report.summary()


def test_the_report_withdraws_the_claim_for_a_kernel_path_that_is_not_invariant(store):
    backend, weights, tensors = store
    report = weights.invariance_report()
    report.products["X (test)"] = ProductRule.NOT_INVARIANT
    assert not report.holds
    assert "X (test)" in report.summary() and report.to_json()["holds"] is False


@pytest.mark.parametrize("tokens", [1, 2, 7])
@pytest.mark.parametrize("heads", [(1, 1), (2, 4)])  # (kv_heads, heads): plain and grouped
def test_kv_padding_makes_masked_cells_exact_zeros(store, tokens, heads):
    """Decoding several sequences together stretches each one's attention span to the
    longest (extra cells masked). With the padding the backend chose, soft_max and the
    product with V over a span and over the stretched span give the same bits, for spans of
    1..5 padding steps stretched by 1..4 steps (the probe checks fewer cases)."""
    backend = store[0]
    padding = backend.cache_config.padding
    assert backend.attention_exact, "no padding gives exact attention on this CPU"
    kv_heads, n_heads = heads
    rng = np.random.default_rng(tokens)
    head_dim, cells = 64, 10 * padding
    values = rng.standard_normal((kv_heads, head_dim, cells)).astype(np.float16)  # permuted V
    for steps in range(1, 6):
        n = steps * padding
        valid = n - int(rng.integers(0, padding))  # the sequence's own cells, then padding
        scores = rng.standard_normal((n_heads, tokens, cells)).astype(np.float32) * 4
        results = []
        for span in (n, n + padding, n + 4 * padding):
            mask = np.zeros((tokens, span), np.float32)
            mask[:, valid:] = -np.inf
            ctx = backend.new_context(64)
            try:
                v = ctx.input(DType.F16, [cells, head_dim, kv_heads], values)
                vt = ctx.view(v, (span, head_dim, kv_heads), v.strides[1:3], 0)
                kq = ctx.input(
                    DType.F32, [span, tokens, n_heads], np.ascontiguousarray(scores[:, :, :span])
                )
                probs = ctx.soft_max(kq, ctx.input(DType.F32, [span, tokens], mask), 0.125)
                out = ctx.mul_mat(vt, probs)
                ctx.compute(out)
                results.append(out.numpy().copy())
            finally:
                ctx.close()
        for stretched in results[1:]:
            assert np.array_equal(results[0], stretched), f"span {n} stretched: other bits"


def test_flash_attention_is_probed_and_a_failure_is_reported(tiny_llama_path):
    """ggml computes many query rows of flash attention in tiles and a lone row on its own
    (and splits a lone row's cells between threads past 512): where that changes a row's bits,
    a model loaded with flash attention must withdraw the claim and say why."""
    from hearth.plugins.registry import load_installed_model as load_model

    loaded = load_model(tiny_llama_path, num_threads=2, flash_attention=True)
    try:
        report = loaded.weights.invariance_report()
        assert report.flash_attention and report.kv_padding == 256
        assert report.attention_exact is loaded.backend.attention_exact
        if not report.attention_exact:
            assert not report.holds and "flash attention" in report.summary()
    finally:
        loaded.close()
