"""The KV-cache scenarios of Ollama's `kvcache/causal_test.go`
(https://github.com/ollama/ollama/blob/main/kvcache/causal_test.go).

Every scenario runs on the numpy reference backend and on ggml, with permuted V off and on, as
Ollama's test runs each with PermutedV false and true. As there: capacity 16, max_batch 16 unless
a case says otherwise, padding 1 (so views are exact), cache type F16, and each pass's values are
written as both K and V. A pass's views are read back through `ctx.cont(view)` + compute.

Each Ollama case is kept verbatim (`expected` = Ollama's K view, `mask` = Ollama's mask rows) and
checked in two ways:

1. Equivalent facts, always: every token of the batch sees exactly the K (and V) values that
   Ollama's mask lets it see, no more, no fewer.
2. Layout: when our layout is Ollama's (one sequence), our single view must equal Ollama's view
   and mask exactly, which also pins which cells were freed and reused. Where our layout
   differs, `ours` gives our exact views, with the reason next to the case.

Where our semantics deliberately differ from Ollama's, the translation is written at the case:

* Window: ours is llama.cpp's (a token at p sees cells with p - pos < window); Ollama's window W
  lets p see p - pos <= W. So Ollama's W is our W + 1.
* Memory: both free a sequence's cells with pos < lowest - memory (lowest = the lowest position
  of the sequence in the batch, or last + 1 when it is absent), so Ollama's memory M is ours M.
  Ollama's SWA memory defaults to its window; ours to window + max_batch (so follow-up prompts
  can resume), so the ports pass `memory` explicitly.
* Regions: each sequence allocates cells in its own region (batch invariance), and `get()` gives
  one view per run of a sequence's rows, over the cells from that sequence's first cell to its
  last (cells of other sequences in between, as after copy_prefix, are masked). Ollama's
  scenarios with two sequences (which pass max_sequences=1 and rely on a shared cell pool) use
  max_sequences=2 here, and Ollama's block-diagonal mask becomes one view per run.
* Ollama's views start at the first cell inside the window; ours at the sequence's first cell
  still held (cells kept as memory but outside the window appear, masked).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from hearth.engine.input import Batch, sequence_runs
from hearth.engine.kvcache import (
    MAX_POS,
    CacheFullError,
    Causal,
    ShiftNotSupportedError,
    Wrapper,
)
from hearth.engine.ml import CacheConfig, Context, DType, Tensor
from hearth.engine.ml.api import Backend
from hearth.engine.ml.ggml import GGMLBackend
from hearth.engine.ml.reference import NumpyBackend

x = float("-inf")


# -- backends -------------------------------------------------------------------------------
def make_backend(name: str) -> Backend:
    return NumpyBackend() if name == "numpy" else GGMLBackend(num_threads=1)


@pytest.fixture(params=["numpy", "ggml"])
def backend(request):
    b = make_backend(request.param)
    yield b
    b.close()


@pytest.fixture(params=[False, True], ids=["v", "permuted_v"])
def permuted_v(request) -> bool:
    return request.param


def add_shift(ctx: Context, layer: int, key: Tensor, delta: Tensor) -> Tensor:
    """Ollama's test shift function, `key + delta`, so a shift shows in the key values."""
    d = ctx.reshape(ctx.cast(delta, DType.F32), 1, 1, delta.dim(0))
    return ctx.add(ctx.cast(key, DType.F32), d)


def make_batch(ctx: Context, pos: Sequence[int], seqs: Sequence[int]) -> Batch:
    n = len(pos)
    positions = np.asarray(pos, dtype=np.int32)
    outputs = np.arange(n, dtype=np.int32)
    return Batch(
        tokens=ctx.from_numpy(np.zeros(n, np.int32)),
        positions=ctx.from_numpy(positions),
        outputs=ctx.from_numpy(outputs),
        positions_host=positions,
        sequences=np.asarray(seqs, dtype=np.int32),
        outputs_host=outputs,
    )


@dataclass
class ViewResult:
    start: int
    count: int
    keys: np.ndarray  # [n_kv, values per cell]
    values: np.ndarray  # same layout as keys (un-permuted for comparison)
    mask: np.ndarray  # [rows padded, n_kv]


def run_pass(
    backend: Backend,
    cache,
    pos: Sequence[int],
    seqs: Sequence[int],
    values: Sequence[float],
    shape: Sequence[int],
) -> list[ViewResult]:
    """Ollama's testCache body: start_forward, put(values as K and V), get, compute."""
    ctx = backend.new_context()
    try:
        cache.start_forward(ctx, make_batch(ctx, pos, seqs))
        cache.set_layer(0)
        data = np.asarray(values, np.float32).reshape(tuple(reversed(shape)))
        t = ctx.input(DType.F32, tuple(shape), data)
        cache.put(ctx, t, t)
        views = cache.get(ctx)
        outs = []
        for v in views:
            outs += [ctx.cont(v.keys), ctx.cont(v.values), ctx.cont(v.mask)]
        ctx.compute(*outs)
        results = []
        dk, hk = shape[0], shape[1]
        for i, v in enumerate(views):
            n_kv = v.keys.dim(2)
            # A stacked view (one row per stream) is read back as one result per stream.
            keys = outs[3 * i].numpy().reshape(v.streams, n_kv, hk * dk)
            vals = outs[3 * i + 1].numpy()
            if cache.permuted_v:  # [n_kv, dv, hv, streams] ggml = numpy (streams, hv, dv, n_kv)
                vals = vals.reshape(v.streams, hk, dk, n_kv).transpose(0, 3, 1, 2)
            vals = vals.reshape(v.streams, n_kv, hk * dk)
            mask = outs[3 * i + 2].numpy().reshape(v.streams, -1, n_kv)
            if v.streams == 1:
                results.append(ViewResult(v.start, v.count, keys[0], vals[0], mask[0]))
                continue
            # Each stream spans the longest run's cells; past its own run they are masked.
            runs = cache._groups  # the runs of this pass, in stream order
            for j in range(v.streams):
                own = runs[j].n_kv
                assert np.all(mask[j][:, own:] == -np.inf)
                results.append(
                    ViewResult(v.start + j, 1, keys[j][:own], vals[j][:own], mask[j][:, :own])
                )
        return results
    finally:
        ctx.close()


# -- the table ------------------------------------------------------------------------------
@dataclass(frozen=True)
class OurView:
    """One of our views: K per cell (scalars for [1,1,n] inputs), mask rows, V when != K."""

    keys: Sequence[float]
    mask: Sequence[Sequence[float]]
    values: Sequence[float] | None = None


@dataclass(frozen=True)
class Pass:
    """One Ollama testCase, verbatim, plus our layout where it differs (`ours`)."""

    name: str
    values: Sequence[float]
    shape: tuple[int, ...]
    seqs: Sequence[int]
    pos: Sequence[int]
    expected: Sequence[float]  # Ollama's K view
    mask: Sequence[Sequence[float]]  # Ollama's mask, one row per token
    expected_v: Sequence[float] | None = None  # Ollama's V view when a shift made K != V
    ours: Sequence[OurView] | None = None  # None: our single view is exactly Ollama's


@dataclass(frozen=True)
class Remove:
    seq: int
    begin: int
    end: int = MAX_POS


@dataclass(frozen=True)
class CopyPrefix:
    src: int
    dst: int
    length: int


@dataclass(frozen=True)
class Holds:
    """cache.positions(seq) (what the sequence still has) must be `positions`."""

    seq: int
    positions: Sequence[int]


@dataclass(frozen=True)
class Fill:
    """A pass whose views are not checked (Ollama's CanResume tests only Put)."""

    pos: Sequence[int]
    seqs: Sequence[int] | None = None

    def seqs_or_zero(self) -> Sequence[int]:
        return self.seqs if self.seqs is not None else [0] * len(self.pos)


@dataclass(frozen=True)
class CanResume:
    seq: int
    answers: dict[int, bool]


@dataclass(frozen=True)
class Scenario:
    make: Callable[[], Causal]
    steps: Sequence[object]
    max_sequences: int = 1
    max_batch: int = 16
    capacity: int = 16


def _seq(n: int) -> list[float]:
    return [float(i) for i in range(1, n + 1)]


# Ollama's cases are kept in their own layout (one list per line), so the formatter is off here.
# fmt: off
SCENARIOS: dict[str, Scenario] = {
    "TestStore": Scenario(
        make=Causal,
        steps=[
            Pass(
                "FirstBatch",
                [111, 211, 121, 221, 131, 231, 112, 212, 122, 222, 132, 232,
                 113, 213, 123, 223, 133, 233, 114, 214, 124, 224, 134, 234],
                (2, 3, 4), [0, 0, 0, 0], [0, 1, 2, 3],
                [111, 211, 121, 221, 131, 231, 112, 212, 122, 222, 132, 232,
                 113, 213, 123, 223, 133, 233, 114, 214, 124, 224, 134, 234],
                [[0, x, x, x], [0, 0, x, x], [0, 0, 0, x], [0, 0, 0, 0]],
            ),
            Pass(
                "SecondBatch", [115, 215, 125, 225, 135, 235], (2, 3, 1), [0], [4],
                [111, 211, 121, 221, 131, 231, 112, 212, 122, 222, 132, 232,
                 113, 213, 123, 223, 133, 233, 114, 214, 124, 224, 134, 234,
                 115, 215, 125, 225, 135, 235],
                [[0, 0, 0, 0, 0]],
            ),
        ],
    ),
    # Ollama NewSWACache(1): window 1 -> our window 2; its memory defaults to the window (1),
    # ours to window + max_batch, so memory=1 is passed (the same cells are freed).
    "TestSWA": Scenario(
        make=lambda: Causal(window=2, memory=1),
        steps=[
            Pass(
                "FirstBatch", [1, 2, 3, 4], (1, 1, 4), [0, 0, 0, 0], [0, 1, 2, 3],
                [1, 2, 3, 4],
                [[0, x, x, x], [0, 0, x, x], [x, 0, 0, x], [x, x, 0, 0]],
            ),
            # pos 4, 5 free the cells of pos < 3 and reuse cells 0 and 1, out of order; cell 2
            # (pos 2) is stale and masked; pos 3 is still seen by pos 4.
            Pass(
                "SecondBatch", [5, 6], (1, 1, 2), [0, 0], [4, 5],
                [5, 6, 3, 4],
                [[0, x, x, 0], [0, 0, x, x]],
            ),
            Holds(0, [3, 4, 5]),
        ],
    ),
    # Ollama NewSWACache(1) with 2 sequences and maxBatch 2: Ollama raises the memory to
    # window + 1 = 2 for several sequences (the stop token); ours raises it to our window (2),
    # the same number of positions. Regions: each sequence has its own 4 cells (memory +
    # max_batch), so Ollama's "the other sequence reuses the freed cells" (one shared pool)
    # becomes "each sequence reuses its own freed cells", and Ollama's view of seq 1 (which
    # also shows seq 0's cells, masked) is seq 1's cells only.
    "TestSWASeparateBatches": Scenario(
        make=lambda: Causal(window=2, memory=1),
        max_sequences=2,
        max_batch=2,
        steps=[
            Pass(
                "First seq 0", [1, 2], (1, 1, 2), [0, 0], [0, 1],
                [1, 2],
                [[0, x], [0, 0]],
            ),
            # Ollama's view starts inside the window (pos 1); ours at the first cell held.
            Pass(
                "Second seq 0", [3, 4], (1, 1, 2), [0, 0], [2, 3],
                [2, 3, 4],
                [[0, 0, x], [x, 0, 0]],
                ours=[OurView([1, 2, 3, 4], [[x, 0, 0, x], [x, x, 0, 0]])],
            ),
            Pass(
                "First seq 1", [5, 6], (1, 1, 2), [1, 1], [0, 1],
                [5, 6],
                [[0, x], [0, 0]],
            ),
            # seq 0 is absent but still cleaned up (lowest = last + 1 = 4: pos < 2 went).
            Holds(0, [2, 3]),
            Pass(
                "Second seq 1", [7, 8], (1, 1, 2), [1, 1], [2, 3],
                [6, 3, 4, 7, 8],
                [[0, x, x, 0, x], [x, x, x, 0, 0]],
                ours=[OurView([5, 6, 7, 8], [[x, 0, 0, x], [x, x, 0, 0]])],
            ),
            # seq 0 reuses its freed cells 0 and 1: exactly Ollama's view.
            Pass(
                "Third seq 0", [9, 10], (1, 1, 2), [0, 0], [4, 5],
                [9, 10, 3, 4],
                [[0, x, x, 0], [0, 0, x, x]],
            ),
            Holds(1, [2, 3]),  # absent: pos < 4 - 2 went
            Holds(0, [2, 3, 4, 5]),
        ],
    ),
    # Ollama NewSWAMemCache(1, 3): window 1 -> our 2, memory 3 -> ours 3. The cache keeps
    # more than the window; the mask shows only the window.
    "TestSWAMem": Scenario(
        make=lambda: Causal(window=2, memory=3),
        steps=[
            Pass(
                "FirstBatch", [1, 2, 3, 4], (1, 1, 4), [0, 0, 0, 0], [0, 1, 2, 3],
                [1, 2, 3, 4],
                [[0, x, x, x], [0, 0, x, x], [x, 0, 0, x], [x, x, 0, 0]],
            ),
            Pass(
                "SecondBatch", [5, 6], (1, 1, 2), [0, 0], [4, 5],
                [5, 2, 3, 4, 6],
                [[0, x, x, 0, x], [0, x, x, x, 0]],
            ),
            Holds(0, [1, 2, 3, 4, 5]),
        ],
    ),
    "TestChunkedAttention": Scenario(
        make=lambda: Causal(chunk=2),
        steps=[
            Pass(
                "FirstBatch", [1, 2, 3, 4], (1, 1, 4), [0, 0, 0, 0], [0, 1, 2, 3],
                [1, 2, 3, 4],
                [[0, x, x, x], [0, 0, x, x], [x, x, 0, x], [x, x, 0, 0]],
            ),
            Pass(
                "SecondBatch", [5, 6, 7], (1, 1, 3), [0, 0, 0], [4, 5, 6],
                [1, 2, 3, 4, 5, 6, 7],
                [[x, x, x, x, 0, x, x],
                 [x, x, x, x, 0, 0, x],
                 [x, x, x, x, x, x, 0]],
            ),
            Pass(
                "ThirdBatch", [8, 9], (1, 1, 2), [0, 0], [7, 8],
                [1, 2, 3, 4, 5, 6, 7, 8, 9],
                [[x, x, x, x, x, x, 0, 0, x],
                 [x, x, x, x, x, x, x, x, 0]],
            ),
        ],
    ),
    # Two sequences interleaved in one batch: Ollama's block-diagonal mask over one shared
    # view becomes one view per run (regions: max_sequences=2, where Ollama passes 1).
    "TestSequences": Scenario(
        make=Causal,
        max_sequences=2,
        steps=[
            Pass(
                "FirstBatch", [1, 2, 3, 4], (1, 1, 4), [0, 0, 1, 1], [0, 1, 0, 1],
                [1, 2, 3, 4],
                [[0, x, x, x], [0, 0, x, x], [x, x, 0, x], [x, x, 0, 0]],
                ours=[OurView([1, 2], [[0, x], [0, 0]]), OurView([3, 4], [[0, x], [0, 0]])],
            ),
            # One token each at pos 2: each sees only its own 3 entries.
            Pass(
                "SecondBatch", [5, 6], (1, 1, 2), [0, 1], [2, 2],
                [1, 2, 3, 4, 5, 6],
                [[0, 0, x, x, 0, x], [x, x, 0, 0, x, 0]],
                ours=[OurView([1, 2, 5], [[0, 0, 0]]), OurView([3, 4, 6], [[0, 0, 0]])],
            ),
        ],
    ),
    # Shift function key + delta, so shifts show in the keys (regions: max_sequences=2, where
    # Ollama passes 1).
    "TestRemove": Scenario(
        make=lambda: Causal(shift=add_shift),
        max_sequences=2,
        steps=[
            Pass(
                "FirstBatch", [1, 2, 3, 4], (1, 1, 4), [0, 0, 1, 1], [0, 1, 0, 1],
                [1, 2, 3, 4],
                [[0, x, x, x], [0, 0, x, x], [x, x, 0, x], [x, x, 0, 0]],
                ours=[OurView([1, 2], [[0, x], [0, 0]]), OurView([3, 4], [[0, x], [0, 0]])],
            ),
            # Truncate: no shift; the freed cell (1) is reused by the next pass.
            Remove(0, 1),
            Holds(0, [0]),
            Pass(
                "RemoveEnd", [5, 6], (1, 1, 2), [0, 1], [1, 2],
                [1, 5, 3, 4, 6],
                [[0, 0, x, x, x], [x, x, 0, 0, 0]],
                ours=[OurView([1, 5], [[0, 0]]), OurView([3, 4, 6], [[0, 0, 0]])],
            ),
            # Remove from the middle: pos 1 (K 5) moves to pos 0 and its key shifts by -1 to 4;
            # the next pass reuses the freed cell 0.
            Remove(0, 0, 1),
            Holds(0, [0]),
            Holds(1, [0, 1, 2]),
            Pass(
                "RemoveMiddle", [7, 8], (1, 1, 2), [0, 0], [1, 2],
                [7, 4, 3, 4, 6, 8],
                [[0, 0, x, x, x, x], [0, 0, x, x, x, 0]],
                expected_v=[7, 5, 3, 4, 6, 8],  # V is never shifted
                ours=[OurView([7, 4, 8], [[0, 0, x], [0, 0, 0]], values=[7, 5, 8])],
            ),
        ],
    ),
    # copy_prefix shares cells and copies no data: seq 1's view starts at seq 0's cells 0-1
    # (the shared prefix) and ends in its own region (cells 16-17); seq 0's cells 2-3 and the
    # unused cells 4-15 between are masked (regions: max_sequences=2, where Ollama passes 1).
    "TestCopy": Scenario(
        make=lambda: Causal(shift=lambda ctx, layer, key, delta: key),
        max_sequences=2,
        steps=[
            Pass(
                "FirstBatch", [1, 2, 3, 4], (1, 1, 4), [0, 0, 0, 0], [0, 1, 2, 3],
                [1, 2, 3, 4],
                [[0, x, x, x], [0, 0, x, x], [0, 0, 0, x], [0, 0, 0, 0]],
            ),
            CopyPrefix(0, 1, 2),
            Holds(1, [0, 1]),
            Pass(
                "Copy", [5, 6], (1, 1, 2), [1, 1], [3, 4],
                [1, 2, 3, 4, 5, 6],
                [[0, 0, x, x, 0, x], [0, 0, x, x, 0, 0]],
                ours=[OurView([1, 2, 3, 4] + [0] * 12 + [5, 6],
                              [[0, 0] + [x] * 14 + [0, x],
                               [0, 0] + [x] * 14 + [0, 0]])],
            ),
            Holds(0, [0, 1, 2, 3]),
            Holds(1, [0, 1, 3, 4]),
        ],
    ),
    # Ollama NewSWACache(4): window 4 -> ours 5; memory 4 (its default) -> ours 4.
    "TestCanResume": Scenario(
        make=lambda: Causal(window=5, memory=4),
        steps=[
            Fill([0, 1, 2, 3, 4]),
            CanResume(0, {0: True, 1: True, 2: True, 3: True, 4: True}),
            Fill([5]),  # evicts pos 0
            Holds(0, [1, 2, 3, 4, 5]),
            CanResume(0, {0: False, 1: False, 2: False, 3: False, 4: False, 5: True}),
        ],
    ),
    # Ollama NewSWAMemCache(4, 5): window 4 -> ours 5; memory 5 -> ours 5.
    "TestCanResumeSWAMem": Scenario(
        make=lambda: Causal(window=5, memory=5),
        steps=[
            Fill([0, 1, 2, 3, 4, 5, 6]),
            Fill([7]),  # evicts pos < 2
            Holds(0, [2, 3, 4, 5, 6, 7]),
            CanResume(0, {0: False, 1: False, 2: False, 3: False, 4: False, 5: False,
                          6: True, 7: True}),
        ],
    ),
    # Ours only: the default SWA memory (window + max_batch) keeps what a follow-up prompt
    # needs to resume where Ollama's default (the window) would force a reprocess.
    "DefaultSWAMemory": Scenario(
        make=lambda: Causal(window=5),
        steps=[
            Fill([0, 1, 2, 3, 4]),
            Fill([5]),
            Holds(0, [0, 1, 2, 3, 4, 5]),
            CanResume(0, {0: True, 3: True, 5: True, 6: True, 7: False}),
        ],
    ),
}
# fmt: on


def _visible(cells: np.ndarray, mask_rows: np.ndarray) -> list[list[tuple[float, ...]]]:
    """Per token: the sorted per-cell vectors its mask row lets it see."""
    return [sorted(tuple(c) for c in cells[row == 0]) for row in mask_rows]


def check_pass(step: Pass, views: list[ViewResult]) -> None:
    n_tokens = len(step.pos)
    per_cell = int(np.prod(step.shape[:-1]))
    # The views cover the batch: one per run of a sequence's rows.
    assert [(v.start, v.count) for v in views] == sequence_runs(np.asarray(step.seqs))
    for v in views:
        assert np.isin(v.mask, [0.0, x]).all(), "a mask holds only 0 and -inf"
        assert (v.mask[v.count :] == x).all(), "padding rows of a mask are all -inf"

    # 1. Equivalent facts: each token sees exactly what Ollama's mask lets it see.
    o_keys = np.asarray(step.expected, np.float32).reshape(-1, per_cell)
    o_vals = np.asarray(step.expected_v or step.expected, np.float32).reshape(-1, per_cell)
    o_mask = np.asarray(step.mask, np.float32)
    assert o_mask.shape == (n_tokens, len(o_keys))
    want_k, want_v = _visible(o_keys, o_mask), _visible(o_vals, o_mask)
    for v in views:
        rows = v.mask[: v.count]
        assert _visible(v.keys, rows) == want_k[v.start : v.start + v.count], step.name
        assert _visible(v.values, rows) == want_v[v.start : v.start + v.count], step.name

    # 2. Layout.
    if step.ours is None:
        (v,) = views
        np.testing.assert_array_equal(v.keys.reshape(-1), np.asarray(step.expected, np.float32))
        np.testing.assert_array_equal(v.values, o_vals)
        np.testing.assert_array_equal(v.mask[:n_tokens], o_mask)
    else:
        assert len(views) == len(step.ours)
        for v, want in zip(views, step.ours, strict=True):
            np.testing.assert_array_equal(v.keys.reshape(-1), np.asarray(want.keys, np.float32))
            wv = want.values if want.values is not None else want.keys
            np.testing.assert_array_equal(v.values.reshape(-1), np.asarray(wv, np.float32))
            np.testing.assert_array_equal(v.mask[: v.count], np.asarray(want.mask, np.float32))


def run_scenario(scenario: Scenario, backend: Backend, permuted_v: bool) -> Causal:
    cache = scenario.make()
    cache.set_config(CacheConfig(padding=1, permuted_v=permuted_v, mask_dtype=DType.F32))
    cache.init(backend, DType.F16, scenario.max_sequences, scenario.capacity, scenario.max_batch)
    for step in scenario.steps:
        if isinstance(step, Pass):
            views = run_pass(backend, cache, step.pos, step.seqs, step.values, step.shape)
            check_pass(step, views)
        elif isinstance(step, Fill):
            n = len(step.pos)
            run_pass(backend, cache, step.pos, step.seqs_or_zero(), _seq(n), (1, 1, n))
        elif isinstance(step, Remove):
            cache.remove(step.seq, step.begin, step.end)
        elif isinstance(step, CopyPrefix):
            cache.copy_prefix(step.src, step.dst, step.length)
        elif isinstance(step, Holds):
            assert cache.positions(step.seq).tolist() == list(step.positions)
        elif isinstance(step, CanResume):
            got = {p: cache.can_resume(step.seq, p) for p in step.answers}
            assert got == step.answers
        else:  # pragma: no cover
            raise AssertionError(step)
    return cache


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario(name: str, backend: Backend, permuted_v: bool) -> None:
    cache = run_scenario(SCENARIOS[name], backend, permuted_v)
    cache.close()


# -- beyond Ollama's table ------------------------------------------------------------------
def test_copy_prefix_copies_no_data(backend: Backend, permuted_v: bool) -> None:
    """After TestCopy, the storage holds each value once: the shared prefix was not copied."""
    cache = run_scenario(SCENARIOS["TestCopy"], backend, permuted_v)
    keys = cache._keys[0].numpy().reshape(-1)
    written = np.flatnonzero(keys)
    assert written.tolist() == [0, 1, 2, 3, 16, 17]
    assert keys[written].tolist() == [1, 2, 3, 4, 5, 6]


def test_remove_refuses_to_shift_shared_or_without_shift_fn(
    backend: Backend, permuted_v: bool
) -> None:
    config = CacheConfig(padding=1, permuted_v=permuted_v, mask_dtype=DType.F32)
    shared = Causal(shift=add_shift)
    shared.set_config(config)
    shared.init(backend, DType.F16, 2, 16, 16)
    run_pass(backend, shared, [0, 1, 2, 3], [0] * 4, _seq(4), (1, 1, 4))
    shared.copy_prefix(0, 1, 4)
    with pytest.raises(ShiftNotSupportedError):
        shared.remove(1, 0, 1)  # pos 1..3 of seq 1 are shared with seq 0
    shared.remove(1, 2)  # truncating needs no shift
    assert shared.positions(1).tolist() == [0, 1]
    assert shared.positions(0).tolist() == [0, 1, 2, 3]

    plain = Causal()
    plain.set_config(config)
    plain.init(backend, DType.F16, 1, 16, 16)
    run_pass(backend, plain, [0, 1, 2, 3], [0] * 4, _seq(4), (1, 1, 4))
    with pytest.raises(ShiftNotSupportedError):
        plain.remove(0, 0, 1)
    plain.remove(0, 2)
    assert plain.positions(0).tolist() == [0, 1]


def test_full_region_raises_cache_full(backend: Backend, permuted_v: bool) -> None:
    cache = Causal()
    cache.set_config(CacheConfig(padding=1, permuted_v=permuted_v, mask_dtype=DType.F32))
    cache.init(backend, DType.F16, 2, 4, 4)
    run_pass(backend, cache, [0, 1, 2, 3], [0] * 4, _seq(4), (1, 1, 4))
    with pytest.raises(CacheFullError):
        run_pass(backend, cache, [4], [0], [5], (1, 1, 1))
    assert cache.positions(0).tolist() == [0, 1, 2, 3]
    # The other sequence's region is unaffected.
    (view,) = run_pass(backend, cache, [0], [1], [9], (1, 1, 1))
    assert view.keys.reshape(-1).tolist() == [9]


def test_wrapper_routes_layers_and_undoes_a_failed_pass(backend: Backend, permuted_v: bool):
    """gemma3's layout: a sliding-window cache and a global one. When the global one is full,
    the window cache gives back the positions it had taken for the pass (Ollama's
    WrapperCache.StartForward)."""
    swa, full = Causal(window=2, memory=1), Causal()
    cache = Wrapper([swa, full], lambda layer: 0 if layer == 0 else 1)
    cache.set_config(CacheConfig(padding=1, permuted_v=permuted_v, mask_dtype=DType.F32))
    cache.init(backend, DType.F16, 1, 4, 2)

    def run(pos: list[int], vals: list[float]) -> dict[int, tuple[list[float], np.ndarray]]:
        """One pass through both layers (layer l stores the values times l + 1)."""
        ctx = backend.new_context()
        try:
            cache.start_forward(ctx, make_batch(ctx, pos, [0] * len(pos)))
            outs = {}
            for layer in (0, 1):
                cache.set_layer(layer)
                data = np.asarray(vals, np.float32).reshape(-1, 1, 1) * (layer + 1)
                t = ctx.input(DType.F32, (1, 1, len(pos)), data)
                cache.put(ctx, t, t)
                (view,) = cache.get(ctx)
                outs[layer] = (ctx.cont(view.keys), ctx.cont(view.mask))
            ctx.compute(*outs[0], *outs[1])
            return {
                layer: (k.numpy().reshape(-1).tolist(), m.numpy()[: len(pos)])
                for layer, (k, m) in outs.items()
            }
        finally:
            ctx.close()

    run([0, 1], [1, 2])
    got = run([2, 3], [3, 4])
    # Layer 0 (window 2, memory 1): pos 0 slid out, pos 2 took its cell; layer 1 (global,
    # values x2) sees everything.
    assert got[0][0] == [3, 2, 4]
    np.testing.assert_array_equal(got[0][1], [[0, 0, x], [0, x, 0]])
    assert got[1][0] == [2, 4, 6, 8]
    np.testing.assert_array_equal(got[1][1], [[0, 0, 0, x], [0, 0, 0, 0]])
    assert cache.can_resume(0, 4)
    # The global cache (capacity 4) is full: the pass fails and the window cache gives back
    # pos 4 and 5 (what its window slide dropped, pos 1 and 2, is gone, as in Ollama).
    with pytest.raises(CacheFullError):
        run([4, 5], [5, 6])
    assert swa.positions(0).tolist() == [3]
    assert full.positions(0).tolist() == [0, 1, 2, 3]
    assert cache.can_resume(0, 4) and not cache.can_resume(0, 5)
    cache.remove(0, 2)
    assert swa.positions(0).tolist() == [] and full.positions(0).tolist() == [0, 1]
