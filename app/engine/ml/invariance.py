"""Batch invariance, probed on this CPU: which ggml kernel paths keep a row's numbers
independent of what else is in its batch, and how the engine routes around those that don't.

Hearth promises that a request gives the same tokens alone, beside other requests, or with its
prompt served from the cache. ggml's CPU kernels make that true only on some paths, and which
ones depends on the CPU (AVX2, AVX-512, NEON...) and on the build, so nothing is assumed:

* **Weight products** (`probe_product`). For each weight type and memory layout a model uses,
  random activation rows are multiplied alone, in batches of several sizes and shifted by one
  row. Three outcomes:
  - *invariant*: every row has the same bits however it is batched;
  - *lone rows apart*: batches of two or more rows agree with each other, but a row multiplied
    alone comes out differently (llamafile's sgemm needs two rows; one row goes to ggml's
    vec_dot). The engine then multiplies each sequence's rows on their own (`row_groups` in
    `GGMLContext.mul_mat`) and the runner evaluates prompt pieces of at least two rows;
  - *not invariant*: rows depend on their batch even then. For a repacked layout the plain one
    is used instead; for a plain layout there is no other path, and the report says so.
* **Routed experts' products** (`probe_experts`, `ggml_mul_mat_id`): the same for the rows
  of tokens routed to a layer's experts, through the engine's own product (Hearth's experts'
  kernel takes a batch with a row or more per expert, ggml's product fewer rows), with
  enough tokens that the whole batch goes to the kernel and the small ones do not. Expert
  products have no per-sequence fallback: one that is not invariant is reported as such.
* **Attention padding** (`probe_kv_padding`). A sequence attends over its cells rounded up to
  the padding; decoding several sequences together stretches each one's span to the longest
  (the extra cells masked). That only adds exact zeros if the kernels that sum over the cells
  (soft_max, and the product of the probabilities with V) see the extra cells in whole SIMD
  steps: ggml's F16 dot product works in steps of 32 values with AVX2 but 64 with AVX-512, and
  sums a shorter tail separately. The probe picks the smallest padding under which stretched
  spans give the same bits.
* **Flash attention** (`probe_flash_attention`, when it is switched on). ggml computes many
  query rows in tiles and one row on its own; the probe checks that a row's output is the
  same alone, in pieces of a prompt, and over a span padded further.

`InvarianceReport` collects the outcomes for one loaded model; the runner logs it and reports
it (the service shows it in `/api/show` and `/api/ps`), so the claim is made only where it was
checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np

from .tensor import DType

if TYPE_CHECKING:
    from .api import Backend
    from .tensor import Tensor

__all__ = [
    "ProductRule",
    "InvarianceReport",
    "probe_product",
    "probe_experts",
    "probe_kv_padding",
    "probe_flash_attention",
    "PADDING_CANDIDATES",
]

PADDING_CANDIDATES = (32, 64, 128, 256)
_PROBE_ROWS = 17  # odd, past the few-rows kernel's 8 and several SIMD/tile widths
# Row slices (start, stop) multiplied as one batch, compared with the full batch's rows.
_ROW_SLICES = ((0, 2), (0, 3), (0, 4), (0, 5), (0, 8), (0, 9), (0, 16), (1, 17), (3, 12))


class ProductRule(Enum):
    """How rows multiplied by one weight type and layout behave (module docstring)."""

    INVARIANT = "invariant"
    LONE_ROWS_APART = "lone rows apart"
    NOT_INVARIANT = "not invariant"

    @property
    def holds(self) -> bool:
        """Whether the engine can keep rows batch-invariant with this kernel path."""
        return self is not ProductRule.NOT_INVARIANT


@dataclass
class InvarianceReport:
    """What the probes found for one model on this CPU."""

    kv_padding: int
    attention_exact: bool = True  # attention gives a row the same bits in any batch
    flash_attention: bool = False
    products: dict[str, ProductRule] = field(default_factory=dict)  # "Q4_K (CPU)" -> rule
    # Layouts probed and not used because they are not invariant ("Q4_K (CPU_REPACK)").
    rejected: dict[str, ProductRule] = field(default_factory=dict)

    @property
    def holds(self) -> bool:
        return self.attention_exact and all(rule.holds for rule in self.products.values())

    def summary(self) -> str:
        """One sentence for the log and the API."""
        problems = [
            f"ggml's products with {key} weights round rows differently by batch size"
            for key, rule in sorted(self.products.items())
            if not rule.holds
        ]
        if not self.attention_exact and self.flash_attention:
            problems.append("flash attention computes a row alone differently than in a tile")
        elif not self.attention_exact:
            problems.append("attention over a longer masked span rounds differently")
        if problems:
            return (
                "a sequence's numbers may depend on what shares its batch on this CPU: "
                + "; ".join(problems)
            )
        apart = sorted(k for k, r in self.products.items() if r is ProductRule.LONE_ROWS_APART)
        extra = f"; kept apart per sequence: {', '.join(apart)}" if apart else ""
        if self.rejected:
            extra += f"; not used, as not invariant: {', '.join(sorted(self.rejected))}"
        return f"batch-invariant (checked at load; KV padding {self.kv_padding}{extra})"

    def to_json(self) -> dict[str, object]:
        return {
            "holds": self.holds,
            "summary": self.summary(),
            "kv_padding": self.kv_padding,
            "attention_exact": self.attention_exact,
            "flash_attention": self.flash_attention,
            "products": {k: rule.value for k, rule in sorted(self.products.items())},
            "rejected_layouts": {k: rule.value for k, rule in sorted(self.rejected.items())},
        }


def probe_product(backend: Backend, weight: Tensor) -> ProductRule:
    """Multiply `weight` (loaded, in the layout under test) by random rows in every batch
    shape of `_ROW_SLICES` and alone, all in one graph, and classify (module docstring).
    The engine's own mul_mat is used, so Hearth's kernels are probed with ggml's."""
    k = weight.dim(0)
    x = np.random.default_rng(7).standard_normal((_PROBE_ROWS, k)).astype(np.float32)
    ctx = backend.new_context(4 * (_PROBE_ROWS + len(_ROW_SLICES)) + 16)
    try:
        rows = ctx.input(DType.F32, [k, _PROBE_ROWS], x)

        def product(start: int, stop: int) -> object:
            part = ctx.view(rows, (k, stop - start), (rows.strides[1],), start * rows.strides[1])
            return ctx.mul_mat(weight, part)

        full = product(0, _PROBE_ROWS)
        alone = [product(i, i + 1) for i in range(_PROBE_ROWS)]
        sliced = [(start, stop, product(start, stop)) for start, stop in _ROW_SLICES]
        ctx.compute(full, *alone, *(t for _, _, t in sliced))  # type: ignore[arg-type]
        return _classify(_PROBE_ROWS, full, alone, sliced)
    finally:
        ctx.close()


def _classify(
    n: int, full: Any, alone: list[Any], sliced: list[tuple[int, int, Any]]
) -> ProductRule:
    """The rule for `n` rows computed as one batch (`full`), one by one and in slices
    (start, stop, product), each product's rows along its last dimensions."""
    reference = full.numpy().reshape(n, -1)
    batches_agree = all(
        np.array_equal(t.numpy().reshape(stop - start, -1), reference[start:stop])
        for start, stop, t in sliced
    )
    if not batches_agree:
        return ProductRule.NOT_INVARIANT
    lone = np.concatenate([t.numpy().reshape(1, -1) for t in alone])
    return ProductRule.INVARIANT if np.array_equal(lone, reference) else ProductRule.LONE_ROWS_APART


def probe_experts(backend: Backend, experts: Tensor, used: int) -> ProductRule:
    """probe_product for routed experts `[k, m, n_expert]` (a layer's gate, up or down
    experts) and tokens choosing `used` of them: random tokens and routes, multiplied
    (`ctx.mul_mat_id`) as one batch, in the batches of `_ROW_SLICES` and alone, all in one
    graph. The batch has at least _PROBE_ROWS tokens and enough for a row per expert and
    then some, so that it and its last rows take another path than the small batches."""
    k, n_expert = experts.dim(0), experts.dim(2)
    used = max(1, min(used, n_expert))
    n = max(_PROBE_ROWS, -(-n_expert // used) + 2)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, 1, k)).astype(np.float32)
    ids = np.argsort(rng.random((n, n_expert)), axis=1)[:, :used].astype(np.int32)
    slices = [*_ROW_SLICES, (1, n)]
    ctx = backend.new_context(4 * (n + len(slices)) + 16)
    try:
        rows = ctx.input(DType.F32, [k, 1, n], x)
        routes = ctx.input(DType.I32, [used, n], ids)

        def product(start: int, stop: int) -> object:
            count = stop - start
            part = ctx.view(rows, (k, 1, count), rows.strides[1:3], start * rows.strides[2])
            chosen = ctx.view(
                routes, (used, count), (routes.strides[1],), start * routes.strides[1]
            )
            return ctx.mul_mat_id(experts, part, chosen)

        full = product(0, n)
        alone = [product(i, i + 1) for i in range(n)]
        sliced = [(start, stop, product(start, stop)) for start, stop in slices]
        ctx.compute(full, *alone, *(t for _, _, t in sliced))  # type: ignore[arg-type]
        rule = _classify(n, full, alone, sliced)
        # No fallback keeps a lone token's expert rows apart: that too is not invariant.
        return ProductRule.INVARIANT if rule is ProductRule.INVARIANT else ProductRule.NOT_INVARIANT
    finally:
        ctx.close()


def probe_kv_padding(backend: Backend, head_dim: int = 128) -> int | None:
    """The smallest padding (of `PADDING_CANDIDATES`) under which attention over a span
    stretched by masked cells gives the same bits as over the span itself, for one and for
    several query rows; None if none does."""
    for padding in PADDING_CANDIDATES:
        if _padding_holds(backend, padding, head_dim):
            return padding
    return None


def _padding_holds(backend: Backend, padding: int, head_dim: int) -> bool:
    """soft_max and the probabilities-times-V product (the attention ops that sum over
    cells, in the layout the non-flash path uses) over n cells vs n + extra masked cells."""
    rng = np.random.default_rng(padding)
    extra = 2 * padding
    ctx = backend.new_context(256)
    try:
        pairs = []
        for n in (padding, 3 * padding):
            for tokens in (1, 2, 5):
                total = n + extra
                # V as the cache holds it for this path: [cells, head_dim] rows of cells.
                values = rng.standard_normal((head_dim, total)).astype(np.float16)
                scores = rng.standard_normal((tokens, total)).astype(np.float32) * 4
                mask = np.zeros((tokens, total), np.float32)
                mask[:, n:] = -np.inf
                long_v = ctx.input(DType.F16, [total, head_dim], values)
                short_v = ctx.view(long_v, (n, head_dim), (long_v.strides[1],), 0)
                outs = []
                for cells, v in ((total, long_v), (n, short_v)):
                    kq = ctx.input(
                        DType.F32, [cells, tokens], np.ascontiguousarray(scores[:, :cells])
                    )
                    m = ctx.input(DType.F32, [cells, tokens], np.ascontiguousarray(mask[:, :cells]))
                    probs = ctx.soft_max(kq, m, 0.125)
                    outs.append((probs, ctx.mul_mat(v, probs), cells))
                pairs.append((n, tokens, outs))
        ctx.compute(*(t for _, _, outs in pairs for p, o, _ in outs for t in (p, o)))
        for n, tokens, ((p_long, o_long, total), (p_short, o_short, _)) in pairs:
            long_probs = p_long.numpy().reshape(tokens, total)
            if not np.array_equal(long_probs[:, :n], p_short.numpy().reshape(tokens, n)):
                return False
            if not np.array_equal(o_long.numpy(), o_short.numpy()):
                return False
        return True
    finally:
        ctx.close()


def probe_flash_attention(backend: Backend, head_dim: int = 64) -> bool:
    """Whether ggml's flash attention gives each query row the same bits alone, in pieces of
    several rows, and over a span stretched by masked cells (F16 cache)."""
    rng = np.random.default_rng(1)
    # Past ggml's query tile (tiled path) and 512 cells (a lone row's split-KV path).
    rows, heads, span = 72, 2, 512
    q = rng.standard_normal((heads, rows, head_dim)).astype(np.float32)
    k = rng.standard_normal((1, 2 * span, head_dim)).astype(np.float16)
    v = rng.standard_normal((1, 2 * span, head_dim)).astype(np.float16)
    visible = span - rows - 40 + np.arange(rows)  # row i sees cells up to visible[i]
    ctx = backend.new_context(256)
    try:
        keys = ctx.input(DType.F16, [head_dim, 2 * span, 1], k)
        vals = ctx.input(DType.F16, [head_dim, 2 * span, 1], v)
        queries = ctx.input(DType.F32, [head_dim, rows, heads], q)

        def attend(start: int, count: int, cells: int) -> object:
            mask_rows = -(-count // 32) * 32  # ggml wants mask rows padded (GGML_KQ_MASK_PAD)
            mask = np.full((mask_rows, cells), -np.inf, np.float32)
            for r in range(count):
                mask[r, : visible[start + r] + 1] = 0
            m = ctx.input(DType.F16, [cells, mask_rows], mask.astype(np.float16))
            qv = ctx.view(
                queries, (head_dim, count, heads), queries.strides[1:3], start * queries.strides[1]
            )
            k_span = ctx.view(keys, (head_dim, cells, 1), keys.strides[1:3], 0)
            v_span = ctx.view(vals, (head_dim, cells, 1), vals.strides[1:3], 0)
            return ctx.flash_attention(qv, k_span, v_span, m, 0.125)  # [head_dim, heads, count]

        whole = attend(0, rows, span)
        parts = [(s, c, attend(s, c, span)) for s, c in ((0, 2), (2, 3), (5, 67))]
        alone = [(r, 1, attend(r, 1, span)) for r in (0, 1, rows - 1)]
        stretched = attend(0, rows, 2 * span)
        ctx.compute(whole, stretched, *(t for _, _, t in parts + alone))  # type: ignore[arg-type]
        reference = whole.numpy().reshape(rows, -1)  # type: ignore[attr-defined]
        if not np.array_equal(stretched.numpy().reshape(rows, -1), reference):  # type: ignore[attr-defined]
            return False
        return all(
            np.array_equal(t.numpy().reshape(c, -1), reference[s : s + c])  # type: ignore[attr-defined]
            for s, c, t in parts + alone
        )
    finally:
        ctx.close()
