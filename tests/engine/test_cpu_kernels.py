"""Hearth's CPU kernel for quantized weights times several rows (ml/_kernels.c).

The kernel must give exactly ggml's numbers (so llama.cpp's): it is compared bit for bit with
ggml's mul_mat, for both of ggml's code paths (one row: vec_dot; several rows: llamafile's
sgemm, or vec_dot again for K-quants), on each of the kernel's code paths the CPU has
(AVX-512 and AVX2) at every kind of row count it takes (few rows, and up to a prompt's
worth), and independently with a numpy product of gguf's dequantized weights.
"""

from __future__ import annotations

import ggml as g
import gguf
import numpy as np
import pytest

from hearth import env
from hearth.engine.ml import ggml_kernels
from hearth.engine.ml.ggml import GGMLBackend
from hearth.engine.ml.ggml_kernels import (
    FEW_ROWS,
    ISA_AVX2,
    ISA_AVX512,
    MANY_FROM_32,
    FewRowsKernel,
    random_blocks,
    takes,
)
from hearth.engine.ml.tensor import DType

QT = gguf.GGMLQuantizationType
TYPES = {
    DType.Q8_0: QT.Q8_0,
    DType.Q5_0: QT.Q5_0,
    DType.Q4_0: QT.Q4_0,
    DType.Q4_K: QT.Q4_K,
    DType.Q6_K: QT.Q6_K,
}
K_TYPES = [DType.Q4_K, DType.Q6_K]  # blocks of 256, activations in Q8_K; any row count
ISAS = {ISA_AVX512: "avx512", ISA_AVX2: "avx2"}
_BLOCK_BYTES = {DType.Q8_0: 34, DType.Q5_0: 22, DType.Q4_0: 18, DType.Q4_K: 144, DType.Q6_K: 210}


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            lines = [line for line in f if line.startswith("flags")]
    except OSError:  # not Linux: the kernel's CPU check cannot be confirmed here
        return set()
    return set(lines[0].split(":", 1)[1].split()) if lines else set()


def _cpu_can_run_it() -> bool:
    built = all(getattr(g, f"ggml_cpu_has_{n}")() for n in ("avx2", "fma", "f16c"))
    return built and {"avx2", "fma", "f16c"} <= _cpu_flags()


@pytest.fixture(scope="module")
def kernel(backend):
    if backend.few_rows_kernel is None:
        pytest.skip("Hearth's CPU kernel is not in use on this machine")
    return backend.few_rows_kernel


@pytest.fixture(params=list(ISAS), ids=list(ISAS.values()))
def path(request, kernel):
    """The kernel on one code path (every enabled type on it); skipped where the CPU lacks it."""
    if request.param > kernel.best_isa:
        pytest.skip(f"this CPU has no {ISAS[request.param]} path")
    return kernel.using(request.param)


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


def _multiply(backend: GGMLBackend, dtype: DType, raw: np.ndarray, x: np.ndarray, kernel):
    """ctx.mul_mat(weights, x) with `kernel` (None: ggml's mul_mat); also says which op ran."""
    m, n, k = raw.shape[0], x.shape[0], x.shape[1]
    saved = backend.few_rows_kernel
    backend.few_rows_kernel = kernel
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


def _assert_equals_ggml(backend, kernel, dtype, raw, x, one_row_checks):
    """The kernel's product equals ggml's mul_mat and, for rows `one_row_checks`, ggml's
    one-row product (vec_dot), bit for bit."""
    n = len(x)
    got, op = _multiply(backend, dtype, raw, x, kernel)
    assert op == g.GGML_OP_CUSTOM, "the kernel was not used"
    want, op = _multiply(backend, dtype, raw, x, None)
    assert op == g.GGML_OP_MUL_MAT
    assert np.array_equal(got, want), f"n={n}: differs from ggml's mul_mat"
    # ...and from ggml's one-row kernel (vec_dot), which a sequence decoding alone uses.
    for j in one_row_checks:
        one, _ = _multiply(backend, dtype, raw, x[j : j + 1], None)
        assert np.array_equal(got[j], one[0]), f"n={n}, row {j}: differs from vec_dot"


def test_the_kernel_is_built_and_enabled_where_the_cpu_has_avx2(backend):
    """A silent build failure would only cost speed, so check it is there."""
    if not _cpu_can_run_it():
        pytest.skip("this CPU (or this ggml build) lacks AVX2, FMA or F16C")
    assert backend.few_rows_kernel is not None, "the _kernels extension was not built or loaded"
    assert backend.few_rows_kernel.types == set(TYPES)
    cpu_has_512 = {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= _cpu_flags()
    kept_to_avx2 = env.cpu_kernels() is env.CpuKernels.AVX2  # HEARTH_CPU_KERNELS=avx2
    want = ISA_AVX512 if cpu_has_512 and not kept_to_avx2 else ISA_AVX2
    assert backend.few_rows_kernel.best_isa == want
    for dtype in TYPES:
        assert backend.few_rows_kernel.isa[dtype] == want


@pytest.mark.parametrize("dtype", list(TYPES), ids=lambda d: d.name)
@pytest.mark.parametrize("k, m", [(256, 1), (768, 37), (2048, 130), (1024, 641)])
def test_equals_ggml_bit_for_bit(backend, kernel, dtype, k, m):
    raw, _ = _weights(dtype, k, m, seed=k + m)
    rng = np.random.default_rng(m)
    for n in range(2, FEW_ROWS + 1):
        x = rng.standard_normal((n, k)).astype(np.float32) * 3
        _assert_equals_ggml(backend, kernel, dtype, raw, x, range(n))


@pytest.mark.parametrize("dtype", list(TYPES), ids=lambda d: d.name)
@pytest.mark.parametrize("k, m", [(256, 1), (512, 640), (768, 37), (2048, 130), (1024, 641)])
def test_equals_ggml_bit_for_bit_at_any_row_count(backend, path, dtype, k, m):
    """Each code path, from a few rows to a prompt's worth: full and partial 16-row vectors,
    a short 8-row one, threads sharing weight rows (n < 64) or activation rows (row counts
    the path does not take stay with ggml)."""
    raw, _ = _weights(dtype, k, m, seed=k + m)
    rng = np.random.default_rng(m + 1)
    isa = path.isa[dtype]
    for n in (*range(2, 13), 16, 17, 31, 64, 100, 512):
        if n * k * m > 300_000_000 or not takes(dtype, isa, n):  # ggml's is the slow part
            continue
        x = rng.standard_normal((n, k)).astype(np.float32) * 3
        x[-1] *= 1e-3  # a row of small values: other row scales in the same vector
        _assert_equals_ggml(backend, path, dtype, raw, x, sorted({0, 1, n // 2, n - 1}))


def test_at_extreme_values(backend, path):
    """Largest quants and scales, activations at +-127: no integer sum saturates or wraps
    (K-quants' scaled sums; Q8_0's -128 weights against activations shifted by 128)."""
    k, m, n = 512, 40, 48
    x = np.full((n, k), 5.0, np.float32)
    x[1::2] = -5.0
    x[2, ::3] = -7.0
    for dtype in TYPES:
        raw = random_blocks(dtype, m, k, np.random.default_rng(3))  # sane fp16 scales
        blocks = raw.reshape(-1, _BLOCK_BYTES[dtype])
        if dtype == DType.Q4_K:  # 6-bit scales and minimums, 4-bit quants: all at 63 / 15
            blocks[:, 4:] = 0xFF
        elif dtype == DType.Q6_K:  # 6-bit quants at 63, int8 scales at -128 and 127
            blocks[:, :192] = 0xFF
            blocks[0::2, 192:208] = 0x80
            blocks[1::2, 192:208] = 0x7F
        elif dtype == DType.Q8_0:  # weights at -128 and 127
            blocks[0::2, 2:] = 0x80
            blocks[1::2, 2:] = 0x7F
        else:  # Q5_0, Q4_0: the most negative quants (0 bits), then the largest
            blocks[0::2, 2:] = 0x00
            blocks[1::2, 2:] = 0xFF
        rows = [0, 2]
        for nx in (6, n):
            if takes(dtype, path.isa[dtype], nx):
                _assert_equals_ggml(backend, path, dtype, raw, x[:nx], rows)


def test_k_quant_activations_quantized_as_ggml_does(backend, path):
    """The kernel's vectorized Q8_K quantizer is in use (x86) and matches ggml's, also on
    exact ties, a negative largest value, a zero block; rows with NaN, infinity or values too
    small for a finite scale go to ggml's quantizer: the same bits (NaN included) either way."""
    assert path._lib.hearth_kernels_own_quantizer() == 1
    k, m, n = 512, 24, 20
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, k)).astype(np.float32)
    x[0, :256] = np.arange(256) % 64 - 31.0  # with -254 below: iscale 0.5, products .5
    x[0, 100] = -254.0
    x[1, :256] = 0.0
    x[2, 7] = np.nan
    x[3, 300] = np.inf
    x[4, :256] = 1e-39  # subnormal: -127 / 1e-39 overflows
    x[5, 3], x[5, 9] = -7.5, 7.5  # equal magnitudes: the first decides the sign
    for dtype in K_TYPES:
        raw, _ = _weights(dtype, k, m, seed=5)
        for rows in (x[:6], x):  # the few-rows and the many-rows paths
            got, op = _multiply(backend, dtype, raw, rows, path)
            assert op == g.GGML_OP_CUSTOM
            want, _ = _multiply(backend, dtype, raw, rows, None)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("dtype", list(TYPES), ids=lambda d: d.name)
def test_equals_a_numpy_product_of_the_dequantized_weights(backend, kernel, dtype):
    """Independent oracle: gguf's dequantized weights times the activations rounded as ggml
    rounds them, in float64. Only the float summation order differs."""
    k, m = 1024, 96
    raw, dense = _weights(dtype, k, m, seed=7)
    paths = [kernel.using(isa) for isa in ISAS if isa <= kernel.best_isa]
    for n in (5, 40):
        x = np.random.default_rng(8).standard_normal((n, k)).astype(np.float32)
        x_q8 = _activations_as_ggml_rounds_them(dtype, x)
        want = x_q8.astype(np.float64) @ dense.T.astype(np.float64)
        for p in paths:
            if not takes(dtype, p.isa[dtype], n):
                continue
            got, op = _multiply(backend, dtype, raw, x, p)
            assert op == g.GGML_OP_CUSTOM
            np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("threads", [1, 3, 4])
def test_rows_split_between_any_number_of_threads(kernel, threads):
    """Each ggml worker takes a share of the rows: weight rows (pairs, odd counts left over)
    for few activation rows; for K-quants and many rows, activation rows where each thread
    gets at least 32, weight rows otherwise, or both (4 threads: 2 x 2)."""
    b = GGMLBackend(num_threads=threads)
    try:
        cases = [(DType.Q8_0, 256, 7)] + [
            (t, 512, n) for t in (*K_TYPES, DType.Q5_0) for n in (9, 12, 40, 100)
        ]
        for dtype, k, n in cases:
            raw, _ = _weights(dtype, k, 131, seed=threads)
            x = np.random.default_rng(threads).standard_normal((n, k)).astype(np.float32)
            for p in [kernel.using(isa) for isa in ISAS if isa <= kernel.best_isa]:
                if not takes(dtype, p.isa[dtype], n):
                    continue
                got, op = _multiply(b, dtype, raw, x, p)
                want, _ = _multiply(b, dtype, raw, x, None)
                assert op == g.GGML_OP_CUSTOM
                assert np.array_equal(got, want), f"{dtype.name}, n={n}"
    finally:
        b.close()


@pytest.mark.parametrize("dtype", [DType.Q8_0, DType.Q6_K])
def test_one_row_of_a_large_matrix_equals_ggml(backend, kernel, dtype):
    """A lone row goes to the kernel only for weights of LONE_ROW_BYTES or more (an output
    matrix streamed from memory at every token); there it equals ggml's vec_dot bit for bit,
    and a smaller matrix stays with ggml."""
    k = 256
    per_block, block_bytes = ggml_kernels._BLOCKS[dtype]
    row_bytes = k // per_block * block_bytes
    rows = -(-ggml_kernels.LONE_ROW_BYTES // row_bytes) + 3  # just over the bound, odd
    raw, _ = _weights(dtype, k, rows, seed=4)
    x = np.random.default_rng(4).standard_normal((1, k)).astype(np.float32)
    got, op = _multiply(backend, dtype, raw, x, kernel)
    want, ggml_op = _multiply(backend, dtype, raw, x, None)
    assert op == g.GGML_OP_CUSTOM and ggml_op == g.GGML_OP_MUL_MAT
    assert np.array_equal(got, want)
    _, small_op = _multiply(backend, dtype, raw[: rows // 2], x, kernel)
    assert small_op == g.GGML_OP_MUL_MAT


def test_not_used_outside_its_cases(backend, kernel):
    """One row (of a matrix under LONE_ROW_BYTES) and float weights stay with ggml; K-quants
    take any number of rows from two on; the 32-weight block types 2..FEW_ROWS, and from
    MANY_FROM_32 on (Q8_0 on AVX-512 only)."""
    for isa in [isa for isa in ISAS if isa <= kernel.best_isa]:
        path = kernel.using(isa)
        raw, _ = _weights(DType.Q8_0, 64, 8, seed=1)
        many = g.GGML_OP_CUSTOM if isa == ISA_AVX512 else g.GGML_OP_MUL_MAT
        cases = [(1, g.GGML_OP_MUL_MAT), (FEW_ROWS, g.GGML_OP_CUSTOM)]
        cases += [(FEW_ROWS + 1, g.GGML_OP_MUL_MAT), (MANY_FROM_32, many), (64, many)]
        for n, want in cases:
            _, op = _multiply(backend, DType.Q8_0, raw, np.ones((n, 64), np.float32), path)
            assert op == want, (ISAS[isa], n)
        raw, _ = _weights(DType.Q5_0, 64, 8, seed=1)
        for n, want in ((FEW_ROWS + 1, g.GGML_OP_MUL_MAT), (MANY_FROM_32, g.GGML_OP_CUSTOM)):
            _, op = _multiply(backend, DType.Q5_0, raw, np.ones((n, 64), np.float32), path)
            assert op == want, (ISAS[isa], n)
        for dtype in K_TYPES:
            raw, _ = _weights(dtype, 256, 8, seed=1)
            for n, want in ((1, g.GGML_OP_MUL_MAT), (2, g.GGML_OP_CUSTOM), (9, g.GGML_OP_CUSTOM)):
                _, op = _multiply(backend, dtype, raw, np.ones((n, 256), np.float32), path)
                assert op == want
            _, op = _multiply(backend, dtype, raw, np.ones((700, 256), np.float32), path)
            assert op == g.GGML_OP_CUSTOM
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


def test_a_build_of_other_sources_is_not_used(monkeypatch, backend, kernel):
    """A stale extension (another calling convention or set of cases) would abort on a case
    it does not know: the versions must match."""
    monkeypatch.setattr(ggml_kernels, "_ABI", ggml_kernels._ABI + 1)
    assert FewRowsKernel._checked_on(backend) is None


def test_kept_to_avx2_by_the_environment(monkeypatch, kernel):
    """`HEARTH_CPU_KERNELS=avx2`: only the AVX2 paths are checked and used."""
    monkeypatch.setenv("HEARTH_CPU_KERNELS", "avx2")
    b = GGMLBackend(num_threads=2)
    try:
        checked = FewRowsKernel._checked_on(b)  # the check itself (for_backend keeps one)
        assert checked is not None
        assert checked.best_isa == ISA_AVX2
        assert set(checked.isa.values()) == {ISA_AVX2}
        assert takes(DType.Q5_0, ISA_AVX2, 64) and not takes(DType.Q8_0, ISA_AVX2, 64)
        assert checked.types == kernel.types
    finally:
        b.close()


def test_the_check_at_load_is_cheap(backend, kernel):
    """It runs on every model load: every type, row count and code path. Its work is small
    by construction (two blocks by 37 weight rows, under 300 activation rows a graph: about
    0.02 s of CPU on two cores); the time bound is loose, as on a busy machine ggml's workers
    spin while waiting for each other."""
    import time

    assert sum(ggml_kernels._CHECK_ROWS) < 300
    start = time.process_time()
    assert FewRowsKernel._checked_on(backend) is not None
    assert time.process_time() - start < 10.0


def test_check_covers_many_rows():
    rows = set(ggml_kernels._CHECK_ROWS)
    assert set(range(1, 13)) | {16, 17, 33, 64} <= rows
