"""Routed experts times a prompt's tokens: ggml's mul_mat_id against Hearth's kernel.

    .venv/bin/python bench/expert_rows.py [--threads 2] [--tokens 1,8,64,256,512] [--repeat 10]

At Qwen3-30B-A3B's expert shapes (128 experts, 8 used per token; gate/up Q4_K [2048, 768],
down Q4_K and Q6_K [768, 2048], ggml's ne = [k, m]), each token choosing 8 distinct experts at
random, prints the time of one mul_mat_id (minimum over `--repeat` runs of the graph) for:
  plain     ggml's mul_mat_id on plain blocks (vec_dot, one weight row and row at a time)
  repacked  ggml's mul_mat_id on the CPU_REPACK layout (what llama.cpp uses for Q4_K; not
            batch-invariant, so Hearth does not)
  hearth    Hearth's kernel (ggml_experts.ExpertsKernel: the activations quantized once by a
            node of their own, then each expert times the rows routed to it), "-" where it
            leaves the case to ggml
Only times printed in the same run are comparable.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import ggml as g
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernel_rows import best_compute_ms  # noqa: E402

from hearth.engine.ml.ggml import GGMLBackend  # noqa: E402
from hearth.engine.ml.ggml_kernels import random_blocks  # noqa: E402
from hearth.engine.ml.ggml_lib import metadata_context  # noqa: E402
from hearth.engine.ml.ggml_tensor import GGMLTensor  # noqa: E402
from hearth.engine.ml.tensor import DType  # noqa: E402
from hearth.engine.ml.weights import _extra_buffer_types  # noqa: E402

EXPERTS, USED = 128, 8
SHAPES = [(DType.Q4_K, 2048, 768), (DType.Q4_K, 768, 2048), (DType.Q6_K, 768, 2048)]


class _Experts:
    """Experts [k, m, EXPERTS] in a buffer of their own, plain or in ggml's CPU_REPACK layout
    (`tensor` None where ggml has none for the type)."""

    def __init__(self, backend: GGMLBackend, dtype: DType, k: int, m: int, raw: np.ndarray,
                 repacked: bool) -> None:  # fmt: skip
        self.ctx = metadata_context(2)
        self.buf = None
        self.tensor: GGMLTensor | None = None
        p = g.ggml_new_tensor_3d(self.ctx, int(dtype), k, m, EXPERTS)
        buft = backend.cpu_buffer_type
        if repacked:
            names = {g.ggml_backend_buft_name(b): b for b in _extra_buffer_types()}
            buft = names.get(b"CPU_REPACK")
            if buft is None or dtype != DType.Q4_K:
                return
        self.buf = g.ggml_backend_alloc_ctx_tensors_from_buft(self.ctx, buft)
        if self.buf:
            g.ggml_backend_tensor_set(p, raw.ctypes.data, 0, raw.nbytes)
            self.tensor = GGMLTensor(p, self.ctx)

    def close(self) -> None:
        if self.buf:
            g.ggml_backend_buffer_free(self.buf)
        g.ggml_free(self.ctx)


def routes(n: int, rng: np.random.Generator) -> np.ndarray:
    """[n, USED] distinct experts per token."""
    return np.argsort(rng.random((n, EXPERTS)), axis=1)[:, :USED].astype(np.int32)


def time_product(
    backend: GGMLBackend, experts: GGMLTensor, x: np.ndarray, ids: np.ndarray, repeat: int
) -> float:
    """Milliseconds of one mul_mat_id (x [n, k] broadcast to every chosen expert)."""
    ctx = backend.new_context(16)
    try:
        n, k = x.shape
        xt = ctx.input(DType.F32, [k, 1, n], x)
        it = ctx.input(DType.I32, [USED, n], ids)
        y = ctx.mul_mat_id(experts, xt, it)
        ctx.compute(y)
        return best_compute_ms(backend, ctx, repeat)
    finally:
        ctx.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", default="1,8,64,256,512")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    backend = GGMLBackend(num_threads=args.threads)
    kernel = getattr(backend, "experts_kernel", None)
    print(f"{args.threads} threads; ms per mul_mat_id (minimum of {args.repeat}); "
          f"{EXPERTS} experts, {USED} per token; ggml ne = [k, m]")  # fmt: skip
    print(f"{'type':5}{'k':>6}{'m':>5}{'tokens':>7}{'plain':>9}{'repack':>9}{'hearth':>9}")
    rng = np.random.default_rng(0)
    try:
        for dtype, k, m in SHAPES:
            raw = random_blocks(dtype, m * EXPERTS, k, rng)
            plain, repacked = (_Experts(backend, dtype, k, m, raw, r) for r in (False, True))
            assert plain.tensor is not None
            try:
                for n in (int(t) for t in args.tokens.split(",")):
                    x = rng.standard_normal((n, k)).astype(np.float32)
                    ids = routes(n, rng)
                    backend.experts_kernel = None  # type: ignore[attr-defined]
                    times = [time_product(backend, plain.tensor, x, ids, args.repeat)]
                    times.append(
                        time_product(backend, repacked.tensor, x, ids, args.repeat)
                        if repacked.tensor is not None
                        else float("nan")
                    )
                    backend.experts_kernel = kernel  # type: ignore[attr-defined]
                    times.append(
                        time_product(backend, plain.tensor, x, ids, args.repeat)
                        if kernel is not None and kernel.takes(dtype, n, USED, EXPERTS)
                        else float("nan")
                    )
                    line = f"{dtype.name:5}{k:6}{m:5}{n:7}"
                    line += "".join(f"{'-':>9}" if t != t else f"{t:9.3f}" for t in times)
                    print(line, flush=True)
            finally:
                repacked.close()
                plain.close()
    finally:
        backend.experts_kernel = kernel  # type: ignore[attr-defined]
        backend.close()


if __name__ == "__main__":
    main()
