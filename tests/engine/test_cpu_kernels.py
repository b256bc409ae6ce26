"""Hearth's CPU kernel for quantized weights times a few rows (ml/_kernels.c).

The kernel must give exactly ggml's numbers (so llama.cpp's): it is compared bit for bit with
ggml's mul_mat, for both of ggml's code paths (one row: vec_dot; several rows: llamafile's
sgemm), and independently with a numpy product of gguf's dequantized weights.
"""

from __future__ import annotations

import ggml as g
import gguf
import numpy as np
import pytest

from hearth.engine.ml.api import DType
from hearth.engine.ml.ggml import GGMLBackend
from hearth.engine.ml.ggml_kernels import MAX_ROWS, FewRowsKernel, random_blocks

QT = gguf.GGMLQuantizationType
TYPES = {
    DType.Q8_0: QT.Q8_0,
    DType.Q5_0: QT.Q5_0,
    DType.Q4_0: QT.Q4_0,
    DType.Q4_K: QT.Q4_K,
    DType.Q6_K: QT.Q6_K,
}
K_TYPES = {DType.Q4_K, DType.Q6_K}  # blocks of 256, activations in Q8_K


def _cpu_can_run_it() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            lines = [line for line in f if line.startswith("flags")]
    except OSError:  # not Linux: the kernel's CPU check cannot be confirmed here
        return False
    flags = lines[0].split(":", 1)[1].split() if lines else []
    built = all(getattr(g, f"ggml_cpu_has_{n}")() for n in ("avx2", "fma", "f16c"))
    return built and {"avx2", "fma", "f16c"} <= set(flags)


@pytest.fixture(scope="module")
def backend():
    b = GGMLBackend(num_threads=2)
    yield b
    b.close()


@pytest.fixture(scope="module")
def kernel(backend):
    if backend.few_rows_kernel is None:
        pytest.skip("Hearth's CPU kernel is not in use on this machine")
    return backend.few_rows_kernel


def _weights(dtype: DType, k: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(raw quantized bytes [m, row bytes], the same weights dequantized by gguf [m, k])."""
    rng = np.random.default_rng(seed)
    if dtype in K_TYPES:  # gguf cannot quantize these: random bits, fp16 scales set sanely
        raw = random_blocks(dtype, m, k, rng)
    else:
        raw = gguf.quants.quantize(rng.standard_normal((m, k)).astype(np.float32), TYPES[dtype])
    return raw, gguf.quants.dequantize(raw, TYPES[dtype]).reshape(m, k)


def _activations_as_ggml_rounds_them(dtype: DType, x: np.ndarray) -> np.ndarray:
    """The activation rows after ggml's quantization for `dtype`'s dot product: Q8_0 (blocks
    of 32, by gguf), or Q8_K (blocks of 256: scale -127/v for the value v of largest
    magnitude, round half to even, at most 127), written out here."""
    if dtype not in K_TYPES:
        return gguf.quants.dequantize(gguf.quants.quantize(x, QT.Q8_0), QT.Q8_0).reshape(x.shape)
    blocks = x.reshape(-1, 256).astype(np.float32)
    peak = blocks[np.arange(len(blocks)), np.abs(blocks).argmax(axis=1)]
    iscale = np.float32(-127.0) / peak
    q = np.minimum(np.rint(blocks * iscale[:, None]), 127)
    return (q * (np.float32(1) / iscale)[:, None]).reshape(x.shape)


def _multiply(backend: GGMLBackend, dtype: DType, raw: np.ndarray, x: np.ndarray, *, ours: bool):
    """ctx.mul_mat(weights, x) with the kernel on or off; also says which op ran."""
    m, n, k = raw.shape[0], x.shape[0], x.shape[1]
    saved = backend.few_rows_kernel
    backend.few_rows_kernel = saved if ours else None
    ctx = backend.new_context(16)
    try:
        w = ctx.input(dtype, [k, m], raw)
        y = ctx.mul_mat(w, ctx.input(DType.F32, [k, n], x))
        op = y.ptr.contents.op
        ctx.compute(y)
        return y.numpy().reshape(n, m), op
    finally:
        ctx.close()
        backend.few_rows_kernel = saved


def test_the_kernel_is_built_and_enabled_where_the_cpu_has_avx2(backend):
    """A silent build failure would only cost speed, so check it is there."""
    if not _cpu_can_run_it():
        pytest.skip("this CPU (or this ggml build) lacks AVX2, FMA or F16C")
    assert backend.few_rows_kernel is not None, "the _kernels extension was not built or loaded"
    assert backend.few_rows_kernel.types == set(TYPES)


@pytest.mark.parametrize("dtype", list(TYPES), ids=lambda d: d.name)
@pytest.mark.parametrize("k, m", [(256, 1), (768, 37), (2048, 130), (1024, 641)])
def test_equals_ggml_bit_for_bit(backend, kernel, dtype, k, m):
    raw, _ = _weights(dtype, k, m, seed=k + m)
    rng = np.random.default_rng(m)
    for n in range(2, MAX_ROWS + 1):
        x = rng.standard_normal((n, k)).astype(np.float32) * 3
        got, op = _multiply(backend, dtype, raw, x, ours=True)
        assert op == g.GGML_OP_CUSTOM, "the kernel was not used"
        want, op = _multiply(backend, dtype, raw, x, ours=False)
        assert op == g.GGML_OP_MUL_MAT
        assert np.array_equal(got, want), f"n={n}: differs from ggml's sgemm"
        # ...and from ggml's one-row kernel (vec_dot), which a sequence decoding alone uses.
        for j in range(n):
            one, _ = _multiply(backend, dtype, raw, x[j : j + 1], ours=False)
            assert np.array_equal(got[j], one[0]), f"n={n}, row {j}: differs from vec_dot"


@pytest.mark.parametrize("dtype", list(TYPES), ids=lambda d: d.name)
def test_equals_a_numpy_product_of_the_dequantized_weights(backend, kernel, dtype):
    """Independent oracle: gguf's dequantized weights times the activations rounded as ggml
    rounds them, in float64. Only the float summation order differs."""
    k, m, n = 1024, 96, 5
    raw, dense = _weights(dtype, k, m, seed=7)
    x = np.random.default_rng(8).standard_normal((n, k)).astype(np.float32)
    x_q8 = _activations_as_ggml_rounds_them(dtype, x)
    got, _ = _multiply(backend, dtype, raw, x, ours=True)
    want = x_q8.astype(np.float64) @ dense.T.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("threads", [1, 3])
def test_rows_split_between_any_number_of_threads(kernel, threads):
    """Each ggml worker takes a share of the rows (pairs, with odd counts left over)."""
    b = GGMLBackend(num_threads=threads)
    try:
        raw, _ = _weights(DType.Q8_0, 256, 131, seed=threads)
        x = np.random.default_rng(threads).standard_normal((7, 256)).astype(np.float32)
        got, op = _multiply(b, DType.Q8_0, raw, x, ours=True)
        want, _ = _multiply(b, DType.Q8_0, raw, x, ours=False)
        assert op == g.GGML_OP_CUSTOM
        assert np.array_equal(got, want)
    finally:
        b.close()


def test_not_used_outside_its_cases(backend, kernel):
    """One row, more than MAX_ROWS rows and float weights stay with ggml."""
    raw, _ = _weights(DType.Q8_0, 64, 8, seed=1)
    for n in (1, MAX_ROWS + 1, 64):
        _, op = _multiply(backend, DType.Q8_0, raw, np.ones((n, 64), np.float32), ours=True)
        assert op == g.GGML_OP_MUL_MAT
    ctx = backend.new_context(8)
    try:
        w = ctx.input(DType.F16, [64, 8], np.ones((8, 64), np.float16))
        y = ctx.mul_mat(w, ctx.input(DType.F32, [64, 4], np.ones((4, 64), np.float32)))
        assert y.ptr.contents.op == g.GGML_OP_MUL_MAT
    finally:
        ctx.close()


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("HEARTH_CPU_KERNELS", "0")
    b = GGMLBackend(num_threads=1)
    try:
        assert b.few_rows_kernel is None
        assert FewRowsKernel.for_backend(b) is None
    finally:
        b.close()
