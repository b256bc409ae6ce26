"""Quantized weights times 1..512 activation rows: ggml's kernels against Hearth's.

    .venv/bin/python bench/kernel_rows.py [--threads 2] [--rows 1,4,64,512] [--repeat 30]

For Gemma 3 270M's K-quant matrices (Q4_K attn_output 1024x640 and ffn_down 2048x640, Q6_K
ffn_down 2048x640; ggml's ne = [k, m]), prints the time of one product, the minimum over
`--repeat` runs of the graph (the activation upload excluded), for:
  plain     ggml's mul_mat on plain blocks (vec_dot, one weight row and row at a time)
  repacked  ggml's mul_mat on the CPU_REPACK layout (what llama.cpp uses; Q4_K only on x86;
            Hearth does not use it for Q4_K: not batch-invariant)
  avx512, avx2
            Hearth's kernel on each of its code paths the CPU has; "-" where the path leaves
            the case to ggml (one row; for Q5_0/Q8_0 9..11 rows; Q8_0 above 8 on AVX2)
and the ratios plain/hearth and repacked/hearth for the first (best) path (above 1: Hearth
is faster). `--all` adds Gemma's Q5_0 and Q8_0 shapes. Only ratios printed in the same run
are comparable.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import ggml as g
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hearth.engine.ml.ggml import GGMLBackend  # noqa: E402
from hearth.engine.ml.ggml_kernels import (  # noqa: E402
    ISA_AVX2,
    ISA_AVX512,
    FewRowsKernel,
    random_blocks,
    takes,
)
from hearth.engine.ml.ggml_lib import metadata_context  # noqa: E402
from hearth.engine.ml.ggml_tensor import GGMLTensor  # noqa: E402
from hearth.engine.ml.tensor import DType  # noqa: E402
from hearth.engine.ml.weights import _extra_buffer_types, _supports_matmul  # noqa: E402

SHAPES = [(DType.Q4_K, 1024, 640), (DType.Q4_K, 2048, 640), (DType.Q6_K, 2048, 640)]
# Gemma 3 270M's 32-weight block matrices: Q5_0 ffn_gate / ffn_up, Q8_0 attn_v (`--all`).
MORE_SHAPES = [(DType.Q5_0, 640, 2048), (DType.Q8_0, 640, 256)]


def best_compute_ms(backend: GGMLBackend, ctx: object, repeat: int) -> float:
    """Milliseconds of the graph `ctx` has just computed (so allocated, its inputs uploaded),
    run again `repeat` times without re-uploading: the minimum."""
    sched, graph = backend._sched, ctx._graph  # type: ignore[attr-defined]
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        g.ggml_backend_sched_graph_compute(sched, graph)
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def _time_graph(backend: GGMLBackend, weight: GGMLTensor, x: np.ndarray, repeat: int) -> float:
    """Milliseconds of one mul_mat node, minimum over runs (inputs uploaded once)."""
    ctx = backend.new_context(8)
    try:
        y = ctx.mul_mat(weight, ctx.from_numpy(x))
        ctx.compute(y)  # allocates and uploads
        return best_compute_ms(backend, ctx, repeat)
    finally:
        ctx.close()


class _Weights:
    """Weights [k, m] in a buffer of their own: plain (the CPU buffer type) or repacked (ggml's
    CPU_REPACK); `tensor` is None where ggml has no repacked layout for the type."""

    def __init__(
        self, backend: GGMLBackend, dtype: DType, k: int, m: int, raw: np.ndarray, repacked: bool
    ) -> None:
        self.ctx = metadata_context(2)
        self.buf = None
        self.tensor: GGMLTensor | None = None
        p = g.ggml_new_tensor_2d(self.ctx, int(dtype), k, m)
        t = GGMLTensor(p, self.ctx)
        buft = backend.cpu_buffer_type
        if repacked:
            names = {g.ggml_backend_buft_name(b): b for b in _extra_buffer_types()}
            buft = names.get(b"CPU_REPACK")
            if buft is None or not _supports_matmul(buft, t):
                return
        self.buf = g.ggml_backend_alloc_ctx_tensors_from_buft(self.ctx, buft)
        if self.buf:
            g.ggml_backend_tensor_set(p, raw.ctypes.data, 0, raw.nbytes)
            self.tensor = t

    def close(self) -> None:
        if self.buf:
            g.ggml_backend_buffer_free(self.buf)
        g.ggml_free(self.ctx)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="1,4,64,512")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--all", action="store_true", help="also Q5_0 and Q8_0 (Gemma's shapes)")
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]

    backend = GGMLBackend(num_threads=args.threads)
    kernel = backend.few_rows_kernel
    paths: list[tuple[str, FewRowsKernel]] = []
    if kernel is not None:
        for isa, name in ((ISA_AVX512, "avx512"), (ISA_AVX2, "avx2")):
            if isa <= kernel.best_isa:
                paths.append((name, kernel.using(isa)))
    print(f"{args.threads} threads; ms per product (minimum of {args.repeat}); ggml ne = [k, m]")
    print("ratios: plain and repacked time over the time of Hearth's first path (above 1: faster)")
    head = f"{'type':5}{'k':>6}{'m':>5}{'rows':>6}{'plain':>9}{'repack':>9}"
    head += "".join(f"{name:>9}" for name, _ in paths)
    if paths:
        head += f"{'pl/' + paths[0][0][:4]:>10}{'rp/' + paths[0][0][:4]:>10}"
    print(head)
    rng = np.random.default_rng(0)
    try:
        for dtype, k, m in SHAPES + (MORE_SHAPES if args.all else []):
            raw = random_blocks(dtype, m, k, rng)
            plain_w = _Weights(backend, dtype, k, m, raw, repacked=False)
            repacked = _Weights(backend, dtype, k, m, raw, repacked=True)
            plain = plain_w.tensor
            assert plain is not None
            try:
                for n in rows:
                    x = rng.standard_normal((n, k)).astype(np.float32)
                    backend.few_rows_kernel = None
                    t_plain = _time_graph(backend, plain, x, args.repeat)
                    t_rep = float("nan")
                    if repacked.tensor is not None:
                        t_rep = _time_graph(backend, repacked.tensor, x, args.repeat)
                    line = f"{dtype.name:5}{k:6}{m:5}{n:6}{t_plain:9.3f}" + _ms(t_rep)
                    times = []
                    for _, path in paths:
                        backend.few_rows_kernel = path
                        t = float("nan")  # the path leaves this case to ggml
                        if dtype in path.isa and takes(dtype, path.isa[dtype], n):
                            t = _time_graph(backend, plain, x, args.repeat)
                        times.append(t)
                        line += _ms(t)
                    if times:
                        line += _ratio(t_plain / times[0]) + _ratio(t_rep / times[0])
                    print(line, flush=True)
            finally:
                repacked.close()
                plain_w.close()
    finally:
        backend.few_rows_kernel = kernel
        backend.close()


def _ms(t: float) -> str:
    return f"{'-':>9}" if t != t else f"{t:9.3f}"


def _ratio(r: float) -> str:
    return f"{'-':>10}" if r != r else f"{r:10.2f}"


if __name__ == "__main__":
    main()
