"""Hearth's CPU kernel for routed experts' products (ml/ggml_experts.py, ml/_kernels.c).

The kernel must give exactly ggml's mul_mat_id numbers (so llama.cpp's on the same layout) and
keep every row's numbers independent of the other rows of its batch: it is compared bit for
bit with ggml's mul_mat_id, and with ggml's product of a token alone, on each of its code paths
the CPU has (AVX-512 and AVX2), for routes that give experts every kind of row count, and
independently with a numpy product of gguf's dequantized weights.
"""

from __future__ import annotations

import ctypes

import ggml as g
import gguf
import numpy as np
import pytest

from hearth.engine.ml.ggml import GGMLBackend
from hearth.engine.ml.ggml_experts import MIN_ROWS_PER_EXPERT, ExpertsKernel
from hearth.engine.ml.ggml_kernels import ISA_AVX2, ISA_AVX512, random_blocks
from hearth.engine.ml.tensor import DType

QT = gguf.GGMLQuantizationType
TYPES = {
    DType.Q4_K: QT.Q4_K,
    DType.Q6_K: QT.Q6_K,
    DType.Q4_0: QT.Q4_0,
    DType.Q5_0: QT.Q5_0,
    DType.Q8_0: QT.Q8_0,
}
K_TYPES = (DType.Q4_K, DType.Q6_K)
ISAS = {ISA_AVX512: "avx512", ISA_AVX2: "avx2"}


@pytest.fixture(scope="module")
def kernel(backend):
    if backend.experts_kernel is None:
        pytest.skip("Hearth's CPU kernels are not in use on this machine")
    return backend.experts_kernel


@pytest.fixture(params=list(ISAS), ids=list(ISAS.values()))
def path(request, backend, kernel):
    """The kernel on one code path; skipped where the CPU (or the settings) lack it."""
    rows = backend.few_rows_kernel
    if request.param > rows.best_isa:
        pytest.skip(f"this CPU has no {ISAS[request.param]} path")
    return kernel.using(request.param)


def _experts(dtype: DType, k: int, m: int, n_expert: int, seed: int):
    """(raw quantized experts [n_expert * m, row bytes], the same dequantized by gguf
    [n_expert, m, k])."""
    rng = np.random.default_rng(seed)
    if dtype in K_TYPES:  # gguf cannot quantize these: random bits, fp16 scales set sanely
        raw = random_blocks(dtype, n_expert * m, k, rng)
    else:
        raw = gguf.quants.quantize(
            rng.standard_normal((n_expert * m, k)).astype(np.float32), TYPES[dtype]
        )
    return raw, gguf.quants.dequantize(raw, TYPES[dtype]).reshape(n_expert, m, k)


def _routes(n: int, used: int, n_expert: int, rng, skew: float = 0.0) -> np.ndarray:
    """[n, used] distinct experts per token; `skew` > 0 favours the first experts (as a real
    router favours some)."""
    odds = np.exp(-skew * np.arange(n_expert))
    odds /= odds.sum()
    return np.stack([rng.choice(n_expert, used, replace=False, p=odds) for _ in range(n)]).astype(
        np.int32
    )


def _product(backend, dtype, raw, x, ids, kernel, n_expert):
    """ctx.mul_mat_id(experts, x [n, nx, k], ids [n, used]) with `kernel` (None: ggml's);
    returns ([n, used, m], the op that ran)."""
    n, nx, k = x.shape
    m = raw.shape[0] // n_expert
    saved = backend.experts_kernel
    backend.experts_kernel = kernel
    ctx = backend.new_context(16)
    try:
        w = ctx.input(dtype, [k, m, n_expert], raw)
        xt = ctx.input(DType.F32, [k, nx, n], x)
        y = ctx.mul_mat_id(w, xt, ctx.input(DType.I32, [ids.shape[1], n], ids))
        op = y.ptr.contents.op
        ctx.compute(y)
        return y.numpy().reshape(n, ids.shape[1], m), op
    finally:
        ctx.close()
        backend.experts_kernel = saved


def _activations_as_ggml_rounds_them(dtype: DType, x: np.ndarray) -> np.ndarray:
    """Activation rows after ggml's quantization for `dtype`'s dot product: Q8_0 (gguf's), or
    Q8_K (blocks of 256: scale -127/v for the value v of largest magnitude, round half to
    even, at most 127), written out here."""
    if dtype not in K_TYPES:
        return gguf.quants.dequantize(gguf.quants.quantize(x, QT.Q8_0), QT.Q8_0).reshape(x.shape)
    blocks = x.reshape(-1, 256).astype(np.float32)
    peak = blocks[np.arange(len(blocks)), np.abs(blocks).argmax(axis=1)]
    iscale = np.float32(-127.0) / peak
    q = np.minimum(np.rint(blocks * iscale[:, None]), 127)
    return (q * (np.float32(1) / iscale)[:, None]).reshape(x.shape)


def test_enabled_for_the_types_a_q4_k_m_moe_uses(backend):
    """Where Hearth's dense kernel is in use, the experts' kernel is too, for its K-quants."""
    if backend.few_rows_kernel is None:
        pytest.skip("Hearth's CPU kernels are not in use on this machine")
    assert backend.experts_kernel is not None
    assert {DType.Q4_K, DType.Q6_K} <= set(backend.experts_kernel.isa)


@pytest.mark.parametrize("dtype", list(TYPES), ids=lambda d: d.name)
@pytest.mark.parametrize(
    "n, used, n_expert, skew, nx",
    [
        (64, 4, 16, 0.0, 1),  # about 16 rows each, activations shared by a token's experts
        (64, 4, 16, 0.0, 4),  # one activation row per (token, expert): the down product
        (300, 8, 32, 0.3, 1),  # a prompt: the first experts get most tokens
        (12, 2, 8, 0.0, 2),  # 1..8 rows an expert: the few-rows code
    ],
)
def test_equals_ggml_bit_for_bit(backend, path, dtype, n, used, n_expert, skew, nx):
    if dtype not in path.isa:
        pytest.skip(f"{dtype.name} is not taken on this path")
    k, m = (512, 37) if dtype in K_TYPES else (256, 37)
    raw, _ = _experts(dtype, k, m, n_expert, seed=n)
    rng = np.random.default_rng(n + nx)
    x = rng.standard_normal((n, nx, k)).astype(np.float32)
    ids = _routes(n, used, n_expert, rng, skew)
    got, op = _product(backend, dtype, raw, x, ids, path, n_expert)
    assert op == g.GGML_OP_CUSTOM, "the kernel was not used"
    want, op = _product(backend, dtype, raw, x, ids, None, n_expert)
    assert op == g.GGML_OP_MUL_MAT_ID
    assert np.array_equal(got, want)


@pytest.mark.parametrize("dtype", list(TYPES), ids=lambda d: d.name)
def test_equals_a_numpy_product_of_the_dequantized_weights(backend, kernel, dtype):
    """Independent oracle: gguf's dequantized experts times the activations rounded as ggml
    rounds them, in float64, for each token's chosen experts. Only the float summation
    order differs."""
    k, m, n_expert, used, n = 512, 48, 8, 3, 40
    raw, dense = _experts(dtype, k, m, n_expert, seed=11)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((n, 1, k)).astype(np.float32)
    ids = _routes(n, used, n_expert, rng, skew=0.5)
    x_q = _activations_as_ggml_rounds_them(dtype, x[:, 0]).astype(np.float64)
    want = np.einsum("tjmk,tk->tjm", dense[ids].astype(np.float64), x_q)
    for isa in [isa for isa in ISAS if isa <= max(kernel.isa.values())]:
        path = kernel.using(isa)
        if dtype not in path.isa:
            continue
        got, op = _product(backend, dtype, raw, x, ids, path, n_expert)
        assert op == g.GGML_OP_CUSTOM
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("dtype", K_TYPES, ids=lambda d: d.name)
def test_a_tokens_rows_do_not_depend_on_the_rest_of_the_batch(backend, path, dtype):
    """Token 0's products are the same bits in a batch of 64 tokens, in another batch of 40
    routed differently (its experts then get other row counts and vectors), and alone, where
    ggml's one-row product computes them."""
    k, m, n_expert, used = 512, 40, 16, 4
    raw, _ = _experts(dtype, k, m, n_expert, seed=3)
    rng = np.random.default_rng(4)
    token = rng.standard_normal((1, 1, k)).astype(np.float32)
    route = np.array([[3, 0, 7, 12]], np.int32)
    rows = []
    for n, skew in ((64, 0.0), (40, 1.0)):
        x = np.concatenate([token, rng.standard_normal((n - 1, 1, k)).astype(np.float32)])
        ids = np.concatenate([route, _routes(n - 1, used, n_expert, rng, skew)])
        got, op = _product(backend, dtype, raw, x, ids, path, n_expert)
        assert op == g.GGML_OP_CUSTOM
        rows.append(got[0])
    alone, op = _product(backend, dtype, raw, token, route, path, n_expert)
    assert op == g.GGML_OP_MUL_MAT_ID  # a lone token stays with ggml
    assert np.array_equal(rows[0], rows[1])
    assert np.array_equal(rows[0], alone[0])


@pytest.mark.parametrize("threads", [1, 3, 4])
def test_the_work_is_split_between_any_number_of_threads(kernel, threads):
    """Threads take equal shares of the work along the experts, cutting an expert's weight
    rows where a share ends: the results do not depend on where the cuts fall."""
    b = GGMLBackend(num_threads=threads)
    try:
        for dtype, n, skew in ((DType.Q4_K, 100, 0.0), (DType.Q6_K, 50, 2.0), (DType.Q4_0, 30, 0)):
            raw, _ = _experts(dtype, 256, 61, 8, seed=threads)
            rng = np.random.default_rng(threads)
            x = rng.standard_normal((n, 1, 256)).astype(np.float32)
            ids = _routes(n, 2, 8, rng, skew)
            got, op = _product(b, dtype, raw, x, ids, kernel, 8)
            want, _ = _product(b, dtype, raw, x, ids, None, 8)
            assert op == g.GGML_OP_CUSTOM
            assert np.array_equal(got, want), f"{dtype.name}, {threads} threads"
    finally:
        b.close()


def test_not_used_for_a_lone_token_few_rows_per_expert_or_float_experts(backend, kernel):
    """Decoding (one token, or under MIN_ROWS_PER_EXPERT rows per expert on average) and
    float experts stay with ggml."""
    n_expert, used = 32, 2
    raw, _ = _experts(DType.Q4_K, 256, 8, n_expert, seed=1)
    rng = np.random.default_rng(1)
    least = -(-MIN_ROWS_PER_EXPERT * n_expert // used)  # tokens for a row per expert
    for n, want in ((1, g.GGML_OP_MUL_MAT_ID), (least - 1, g.GGML_OP_MUL_MAT_ID),
                    (least, g.GGML_OP_CUSTOM)):  # fmt: skip
        x = rng.standard_normal((n, 1, 256)).astype(np.float32)
        _, op = _product(backend, DType.Q4_K, raw, x, _routes(n, used, n_expert, rng), kernel, 32)
        assert op == want, n
    ctx = backend.new_context(8)
    try:
        w = ctx.input(DType.F16, [256, 8, 4], np.ones((4, 8, 256), np.float16))
        x = ctx.input(DType.F32, [256, 1, 64], np.ones((64, 1, 256), np.float32))
        ids = ctx.input(DType.I32, [2, 64], np.tile(np.array([0, 1], np.int32), (64, 1)))
        assert ctx.mul_mat_id(w, x, ids).ptr.contents.op == g.GGML_OP_MUL_MAT_ID
    finally:
        ctx.close()


def test_products_of_the_same_activations_share_their_quantized_copy(backend, kernel):
    """A layer's gate and up products read the same rows: they are quantized once."""
    raw, _ = _experts(DType.Q4_K, 256, 8, 4, seed=2)
    ctx = backend.new_context(16)
    try:
        gate = ctx.input(DType.Q4_K, [256, 8, 4], raw)
        up = ctx.input(DType.Q4_K, [256, 8, 4], raw)
        x = ctx.input(DType.F32, [256, 1, 16], np.ones((16, 1, 256), np.float32))
        ids = ctx.input(DType.I32, [2, 16], np.tile(np.array([0, 3], np.int32), (16, 1)))
        a, b = ctx.mul_mat_id(gate, x, ids), ctx.mul_mat_id(up, x, ids)
        assert a.ptr.contents.op == b.ptr.contents.op == g.GGML_OP_CUSTOM
        qa, qb = a.ptr.contents.src[1], b.ptr.contents.src[1]
        assert ctypes.cast(qa, ctypes.c_void_p).value == ctypes.cast(qb, ctypes.c_void_p).value
    finally:
        ctx.close()


def test_off_with_hearths_cpu_kernels(monkeypatch):
    monkeypatch.setenv("HEARTH_CPU_KERNELS", "0")
    b = GGMLBackend(num_threads=1)
    try:
        assert b.experts_kernel is None
        assert ExpertsKernel.for_backend(b, None) is None
    finally:
        b.close()


def test_kept_to_avx2_by_the_environment(monkeypatch, backend, kernel):
    """`HEARTH_CPU_KERNELS=avx2`: the experts' kernel is checked and used on AVX2 only (no
    Q8_0 there, as for the dense kernel's many rows)."""
    from hearth.engine.ml.ggml_kernels import FewRowsKernel

    monkeypatch.setenv("HEARTH_CPU_KERNELS", "avx2")
    rows = FewRowsKernel._checked_on(backend)
    assert rows is not None
    checked = ExpertsKernel._checked_on(backend, rows)
    assert checked is not None
    assert set(checked.isa.values()) == {ISA_AVX2}
    assert {DType.Q4_K, DType.Q6_K} <= set(checked.isa) and DType.Q8_0 not in checked.isa


def test_the_load_probe_finds_expert_products_invariant_and_would_see_otherwise(
    backend, kernel, monkeypatch
):
    """`probe_experts` (run at load for each experts' type) on 128 experts choosing 8: the
    engine's product (this kernel for the whole batch, ggml's for the small ones) keeps rows
    apart from their batch, as the tests above check directly; a product whose rows depend on
    the batch size is caught."""
    from hearth.engine.ml.ggml_context import GGMLContext
    from hearth.engine.ml.ggml_lib import metadata_context
    from hearth.engine.ml.ggml_tensor import GGMLTensor
    from hearth.engine.ml.invariance import ProductRule, probe_experts

    raw, _ = _experts(DType.Q4_K, 256, 16, 128, seed=5)
    meta = metadata_context(2)  # the experts in a buffer of their own, as a model's weights
    p = g.ggml_new_tensor_3d(meta, int(DType.Q4_K), 256, 16, 128)
    buf = g.ggml_backend_alloc_ctx_tensors_from_buft(meta, backend.cpu_buffer_type)
    g.ggml_backend_tensor_set(p, raw.ctypes.data, 0, raw.nbytes)
    w = GGMLTensor(p, meta)
    try:
        calls = []
        real = GGMLContext.mul_mat_id

        def counted(self, *args):
            y = real(self, *args)
            calls.append(y.ptr.contents.op)
            return y

        monkeypatch.setattr(GGMLContext, "mul_mat_id", counted)
        assert probe_experts(backend, w, 8) is ProductRule.INVARIANT
        assert {g.GGML_OP_CUSTOM, g.GGML_OP_MUL_MAT_ID} <= set(calls)

        def by_batch(self, *args):
            y = real(self, *args)
            return self.scale(y, 1.0 + 1e-3 * y.dim(2))

        monkeypatch.setattr(GGMLContext, "mul_mat_id", by_batch)
        assert probe_experts(backend, w, 8) is ProductRule.NOT_INVARIANT
    finally:
        g.ggml_backend_buffer_free(buf)
        g.ggml_free(meta)
