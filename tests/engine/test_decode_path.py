"""The per-token fast paths: the KV cache's single-token decoding path (kvcache/decode.py) and
greedy picks in the graph (engine/greedy.py).

Oracles: the cache's general path (every cell, span and mask recomputed from the whole
sequence, the path the llama.cpp parity and invariance tests pin) for the decoding path, bit for
bit; numpy's argmax of the logits for the greedy picks, on constructed rows with known answers
(equal maxima, NaN, all -inf) and along a generation.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from hearth.engine.forward import ForwardEngine
from hearth.engine.greedy import GreedyNodes
from hearth.engine.input import Batch, PassInput
from hearth.engine.kvcache import Causal
from hearth.engine.kvcache.decode import round_up
from hearth.engine.ml.api import CacheConfig
from hearth.engine.ml.ggml import GGMLBackend
from hearth.engine.ml.tensor import DType
from hearth.plugins.registry import load_installed_model as load_model


@pytest.fixture(scope="module")
def loaded(tiny_llama_path):
    model = load_model(tiny_llama_path, num_threads=1)
    yield model
    model.close()


def _one(tok: int, pos: int, seq: int = 0, greedy: bool = False) -> PassInput:
    return PassInput(
        np.array([tok]), np.array([pos]), np.array([seq]), np.array([0]), greedy=greedy
    )


def _script(engine: ForwardEngine) -> list[np.ndarray]:
    """Logits of a session that decodes across padding boundaries, rejects a draft, shares a
    prefix with a second sequence, decodes both (alone and together) and cuts one back."""
    out = []
    ids = np.random.default_rng(3).integers(3, 500, 20)
    n = len(ids)
    out.append(engine.forward(PassInput(ids, np.arange(n), np.zeros(n), np.array([n - 1]))))
    pos, tok = n, int(out[-1][0].argmax())
    for step in range(90):
        out.append(engine.forward(_one(tok, pos)))
        pos, tok = pos + 1, int(out[-1][0].argmax())
        if step == 40:  # a speculative check of 3 rows, 1 kept
            rows = PassInput(
                np.array([tok, 7, 9]), np.arange(pos, pos + 3), np.zeros(3), np.arange(3),
                lone_rows=frozenset({0}),
            )  # fmt: skip
            out.append(engine.forward(rows))
            engine.cache.reject(0, pos + 1)
            pos, tok = pos + 1, int(out[-1][0].argmax())
    engine.cache.copy_prefix(0, 1, 30)
    pos1, tok1 = 30, 11
    for _ in range(20):
        out.append(engine.forward(_one(tok1, pos1, seq=1)))
        pos1, tok1 = pos1 + 1, int(out[-1][0].argmax())
        out.append(engine.forward(_one(tok, pos)))
        pos, tok = pos + 1, int(out[-1][0].argmax())
    both = PassInput(np.array([tok, tok1]), np.array([pos, pos1]), np.array([0, 1]), np.arange(2))
    out.append(engine.forward(both))
    engine.cache.remove(0, pos - 10)
    pos -= 10
    for _ in range(10):
        out.append(engine.forward(_one(tok, pos)))
        pos, tok = pos + 1, int(out[-1][0].argmax())
    return out


@pytest.mark.parametrize("flash", [False, True])
def test_the_decoding_path_gives_the_general_paths_bits(
    loaded, tiny_llama_path, flash, monkeypatch
):
    if flash:  # (an F16 mask with its rows padded)
        loaded = load_model(tiny_llama_path, num_threads=1, flash_attention=True)
    taken = []
    fast = Causal._prepare_decode

    def counted(self, batch):
        hit = fast(self, batch)
        taken.append(hit)
        return hit

    monkeypatch.setattr(Causal, "_prepare_decode", counted)
    engine = ForwardEngine(loaded, num_ctx=512, num_batch=32, parallel=2)
    try:
        with_path = _script(engine)
    finally:
        engine.close()
    assert sum(taken) > 100  # the path did the steady decoding
    monkeypatch.setattr(Causal, "_prepare_decode", lambda self, batch: False)
    engine = ForwardEngine(loaded, num_ctx=512, num_batch=32, parallel=2)
    try:
        without = _script(engine)
    finally:
        engine.close()
        if flash:
            loaded.close()
    assert len(with_path) == len(without)
    for a, b in zip(with_path, without, strict=True):
        assert a.tobytes() == b.tobytes()


def _snapshot(cache: Causal) -> Causal:
    """The cache's bookkeeping before a pass (the arrays the pass changes, copied)."""
    before = copy.copy(cache)
    before.cell_pos, before.cell_seqs = cache.cell_pos.copy(), cache.cell_seqs.copy()
    before._used = list(cache._used)
    return before


def _fast_path_matches(engine: ForwardEngine, pos: int, tok: int = 5) -> bool | None:
    """Plan and run one decoding row; when the fast path prepared it, check its cell, span
    and mask against the general path's on the bookkeeping from just before (True); None
    when the general path prepared it."""
    cache = engine.cache
    before = _snapshot(cache)
    fast = []
    cache._prepare_decode = lambda batch: (
        fast.append(Causal._prepare_decode(cache, batch)) or fast[-1]
    )
    try:
        plan = engine.plan(_one(tok, pos))
    finally:
        del cache._prepare_decode
    took_fast = fast == [True]
    if took_fast:
        general = copy.copy(before)
        general._decode = {}
        general.prepare(plan.graph.batch.__class__(
            None, None, None, np.array([pos], np.int32), np.zeros(1, np.int32),
            np.zeros(1, np.int32), runs=[(0, 1)],
        ))  # fmt: skip
        ours, theirs = cache._groups[0], general._groups[0]
        assert (ours.first_cell, ours.n_kv) == (theirs.first_cell, theirs.n_kv)
        assert ours.mask.tobytes() == theirs.mask.tobytes()
        assert cache._locs_host.tolist() == general._locs_host.tolist()
        assert (cache.cell_pos == general.cell_pos).all()
        assert (cache.cell_seqs == general.cell_seqs).all()
    engine.run(plan)
    return True if took_fast else None


def test_the_decoding_path_prepares_what_the_general_path_prepares(loaded):
    """Cell, span and mask of each fast-path pass against the general path's on a copy of the
    cache's bookkeeping taken just before."""
    engine = ForwardEngine(loaded, num_ctx=512, num_batch=32)
    assert isinstance(engine.cache, Causal)
    try:
        ids = np.arange(3, 13)
        engine.forward(PassInput(ids, np.arange(10), np.zeros(10), np.array([9])))
        checked = sum(bool(_fast_path_matches(engine, pos)) for pos in range(10, 150))
        assert checked > 100
    finally:
        engine.close()


def test_a_reused_slot_decodes_on_the_fast_path(loaded):
    """A slot the prompt cache reuses keeps a prefix and drops the rest (`remove`): its
    next tokens take the fast path from the second on (the first re-records the state),
    preparing what the general path prepares; before the used bound came down with the
    drop, a freed cell below it kept every later token on the general path."""
    engine = ForwardEngine(loaded, num_ctx=512, num_batch=64)
    assert isinstance(engine.cache, Causal)
    try:
        ids = np.arange(3, 43)
        engine.forward(PassInput(ids, np.arange(40), np.zeros(40), np.array([39])))
        for pos in range(40, 70):
            engine.forward(_one(5, pos))
        engine.cache.remove(0, 20)  # the next request shares the first 20 inputs
        engine.forward(PassInput(ids[20:24], np.arange(20, 24), np.zeros(4), np.array([3])))
        taken = [_fast_path_matches(engine, pos) for pos in range(24, 64)]
        assert taken[0] is None and all(taken[1:])
    finally:
        engine.close()


@pytest.mark.parametrize(
    "row",
    [
        [1.0, 5.0, 3.0, 5.0, 2.0],  # equal maxima: the lowest id
        [0.0, 0.0, 0.0, 0.0, 0.0],
        [1.0, np.nan, 3.0, 2.0, 0.0],  # numpy's argmax takes the NaN
        [-np.inf] * 5,
        [7.0, 1.0, 2.0, 3.0, 4.0],
        [1.0, 2.0, 3.0, 4.0, 9.0],
    ],
)
def test_greedy_picks_in_the_graph_are_numpys_argmax(row):
    backend = GGMLBackend(num_threads=1)
    x = np.array([row, row[::-1]], dtype=np.float32)
    ctx = backend.new_context()
    try:
        logits = ctx.scale(ctx.input(DType.F32, (5, 2), x), 1.0)
        nodes = GreedyNodes.build(ctx, logits)
        ctx.compute(logits, *nodes.outputs)
        assert nodes.read(5, logits).tolist() == x.argmax(axis=1).tolist()
    finally:
        ctx.close()
        backend.close()


@pytest.mark.parametrize("in_graph", [False, True])
def test_greedy_passes_return_the_argmax_of_the_logits(loaded, in_graph):
    engine = ForwardEngine(loaded, num_ctx=256, num_batch=32)
    engine.greedy_on_backend = in_graph
    try:
        ids = np.random.default_rng(5).integers(3, 500, 12)
        rows = PassInput(ids, np.arange(12), np.zeros(12), np.array([3, 11]))
        logits = engine.forward(rows)
        engine.cache.remove(0, 0)
        rows.greedy = True
        picks = engine.forward(rows)
        assert picks.dtype == np.int32 and picks.tolist() == logits.argmax(axis=1).tolist()
        tok = int(picks[-1])
        for pos in range(12, 60):
            logits = engine.forward(_one(tok, pos))
            engine.cache.remove(0, pos)
            pick = engine.forward(_one(tok, pos, greedy=True))
            assert pick.tolist() == [int(logits[0].argmax())]
            tok = int(pick[0])
    finally:
        engine.close()


_LLAMACPP_GREEDY = """
import sys
import numpy as np
from hearth.runner.engine import PassInput, load_engine
from hearth.runner.protocol import RunnerOptions
engine = load_engine(sys.argv[1], RunnerOptions(engine="llamacpp", num_ctx=256, threads=1))
ids = np.random.default_rng(6).integers(3, 500, 12)
rows = PassInput(ids, np.arange(12), np.zeros(12), np.array([3, 11]))
logits = engine.forward(rows)
engine.cache.remove(0, 0)
rows.greedy = True
picks = engine.forward(rows)
assert picks.dtype == np.int32, picks.dtype
assert picks.tolist() == logits.argmax(axis=1).tolist(), (picks, logits.argmax(axis=1))
print("ok")
"""


def test_llamacpps_engine_returns_the_argmax_for_a_greedy_pass(tiny_llama_path):
    """(In a process of its own: llama.cpp's engine never shares one with Hearth's ggml.)"""
    pytest.importorskip("llama_cpp")
    out = subprocess.run(
        [sys.executable, "-c", _LLAMACPP_GREEDY, str(tiny_llama_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


# -- sliding windows ---------------------------------------------------------------------------


class _Bookkeeping:
    """A sliding-window `Causal` alone (bookkeeping only, no tensors: window 5, memory 9,
    regions of 16 cells (13 with a padding of 1), 3 sequences), each pass checked against the
    general path on a copy of the bookkeeping taken just before (no decoding states, nothing
    settled)."""

    def __init__(self, mask_dtype: DType, padding: int) -> None:
        self.cache = Causal(shift=lambda ctx, layer, keys, delta: keys, window=5)
        self.cache.set_config(CacheConfig(padding=padding, permuted_v=False, mask_dtype=mask_dtype))
        no_tensors = SimpleNamespace()  # (a shift has no keys to re-RoPE)
        self.cache.init(no_tensors, DType.F16, max_sequences=3, capacity=64, max_batch=4)  # type: ignore[arg-type]
        assert (self.cache.swa_memory, self.cache.region) == (9, round_up(13, padding))
        self.fast = self.general = 0
        self.released = self.moved = 0
        self.last: dict[int, tuple[int, int]] = {}

    def general_copy(self) -> Causal:
        c = copy.copy(self.cache)
        c.cell_pos, c.cell_seqs = c.cell_pos.copy(), c.cell_seqs.copy()
        c._used, c._seen, c._shared = list(c._used), set(c._seen), set(c._shared)
        c._decode, c._settled = {}, {}
        return c

    def step(self, positions, seqs, runs=None) -> None:
        positions, seqs = np.array(positions, np.int32), np.array(seqs, np.int32)
        n = len(seqs)
        batch = Batch(None, None, None, positions, seqs, np.arange(n, dtype=np.int32), runs=runs)  # type: ignore[arg-type]
        general = self.general_copy()
        general.prepare(batch)
        cache = self.cache
        taken = n == 1 and cache._prepare_decode(batch)
        if not taken:
            cache.prepare(batch)
        else:
            self.fast += 1
            g = cache._groups[0]
            span = (g.first_cell, g.n_kv)
            self.moved += self.last.get(int(seqs[0]), span) != span
            self.last[int(seqs[0])] = span
            self.released += bool(cache._released)
        self.general += not taken
        assert cache._locs_host.tolist() == general._locs_host.tolist()
        assert (cache.cell_pos == general.cell_pos).all()
        assert (cache.cell_seqs == general.cell_seqs).all()
        assert cache._used == general._used
        for ours, theirs in zip(cache._groups, general._groups, strict=True):
            assert (ours.start, ours.count, ours.first_cell, ours.n_kv) == (
                theirs.start, theirs.count, theirs.first_cell, theirs.n_kv,
            )  # fmt: skip
            assert ours.mask.dtype == theirs.mask.dtype
            assert ours.mask.tobytes() == theirs.mask.tobytes()
        assert len(cache._released) == len(general._released)
        for (s, at, cells, pos), (s2, at2, cells2, pos2) in zip(
            cache._released, general._released, strict=True
        ):
            assert (s, at, cells.tolist(), pos.tolist()) == (
                s2,
                at2,
                cells2.tolist(),
                pos2.tolist(),
            )


@pytest.mark.parametrize(
    ("mask_dtype", "padding"), [(DType.F32, 4), (DType.F16, 4), (DType.F32, 1), (DType.F32, 2)]
)
def test_the_decoding_path_with_a_sliding_window_prepares_what_the_general_path_prepares(
    mask_dtype, padding
):
    """Three sequences decoding in turn past a window of 5 positions for hundreds of tokens
    (their 16-cell regions wrap dozens of times), with prompts in batches, a pass holding two
    sequences, speculation-like checks whose rejected rows let cells go and take them back,
    cuts at the end and in the middle (a shift), a shared prefix, and a sequence left out for
    a while: every pass's cells, spans, masks, released cells and bookkeeping are the general
    path's."""
    b = _Bookkeeping(mask_dtype, padding)
    cache = b.cache
    b.step([0, 1, 2, 3], [0] * 4)  # prompts in batches of 4
    b.step([4, 5, 6], [0] * 3)
    b.step([0, 1, 2], [1] * 3)
    pos = {0: 7, 1: 3}
    for step in range(400):
        seq = 1 if step % 3 == 2 else 0
        if 150 <= step < 200:
            seq = 0  # sequence 1 left out a while
        b.step([pos[seq]], [seq])
        pos[seq] += 1
        if step % 37 == 20:  # a check of 3 drafted rows, each a lone row; 1 kept
            p = pos[0]
            b.step([p, p + 1, p + 2], [0] * 3, runs=[(0, 1), (1, 1), (2, 1)])
            cache.reject(0, p + 1)
            pos[0] = p + 1
        if step % 50 == 10:
            cache.remove(0, pos[0] - 3)  # the last 3 positions cut
            pos[0] -= 3
        if step == 100:
            cache.remove(1, pos[1] - 4, pos[1] - 2)  # 2 positions out of the middle
            pos[1] -= 2
        if step == 130:  # both in one pass
            b.step([pos[0], pos[1]], [0, 1])
            pos[0] += 1
            pos[1] += 1
        if step == 250:  # a third sequence shares the first's cells a while (general path;
            # the first's region is not its alone then: its fast path waits)
            cache.copy_prefix(0, 2, pos[0] - 2)
            pos[2] = pos[0] - 2
        if 250 <= step < 255:
            b.step([pos[2]], [2])
            pos[2] += 1
        if step == 255:
            cache.remove(2, 0)
    assert b.fast > 250 and b.general > 20
    assert b.released > 100  # the fast path let cells go (journaled for reject)
    assert b.moved > 0  # and moved spans (rare: cells are reused lowest first)
    held = np.flatnonzero(cache.cell_seqs & np.uint64(1))
    assert len(held) <= cache.region and pos[0] > 10 * cache.region  # cells reused


def test_a_shared_prefix_leaves_the_source_region_as_the_window_passes():
    """A sequence given another's prefix (copy_prefix) lets go of those cells too once its
    window has passed them: both then decode for many times their regions' size, each pass
    the general path's; before, the copy's cells stayed in the source's region for good and
    filled it (CacheFullError within a few dozen tokens)."""
    b = _Bookkeeping(DType.F32, 4)
    cache = b.cache
    b.step([0, 1, 2, 3], [0] * 4)
    b.step([4, 5, 6, 7], [0] * 4)
    cache.copy_prefix(0, 2, 8)  # sequence 2 starts from sequence 0's first 8 positions
    pos = {0: 8, 2: 8}
    for _ in range(200):
        for seq in (0, 2):
            b.step([pos[seq]], [seq])
            pos[seq] += 1
    source = slice(0, cache.region)
    copied = np.flatnonzero(cache.cell_seqs[source] & np.uint64(1 << 2))
    assert len(copied) == 0  # the copy holds nothing of the source's region any more
    assert b.fast > 150  # the source's own decoding took the fast path again


def _window_script(engine: ForwardEngine) -> list[np.ndarray]:
    """Logits of two sequences decoding in turn far past a window of 16 positions and its
    memory (16 + a batch of 8), with lone-row checks of 3 rows whose last 2 are rejected and a
    cut of the last 5 positions."""
    out = []
    rng = np.random.default_rng(4)
    pos, tok = {}, {}
    for seq in (0, 1):
        ids = rng.integers(3, 500, 8)
        rows = PassInput(ids, np.arange(8), np.full(8, seq), np.array([7]))
        out.append(engine.forward(rows))
        pos[seq], tok[seq] = 8, int(out[-1][0].argmax())
    for step in range(160):
        seq = step % 4 == 3  # (1 every fourth token)
        out.append(engine.forward(_one(tok[seq], pos[seq], seq=seq)))
        pos[seq], tok[seq] = pos[seq] + 1, int(out[-1][0].argmax())
        if step % 29 == 10:
            p = pos[0]
            rows = PassInput(
                np.array([tok[0], 7, 9]), np.arange(p, p + 3), np.zeros(3), np.arange(3),
                lone_rows=frozenset({0}),
            )  # fmt: skip
            out.append(engine.forward(rows))
            engine.cache.reject(0, p + 1)
            pos[0], tok[0] = p + 1, int(out[-1][0].argmax())
        if step == 80:
            engine.cache.remove(0, pos[0] - 5)
            pos[0] -= 5
    return out


@pytest.mark.parametrize("flash", [False, True])
def test_a_sliding_window_models_logits_are_the_general_paths_bits(
    tiny_gemma3_path, flash, monkeypatch
):
    """A tiny Gemma 3 (5 of its 6 layers slide), with the decoding path and without."""
    model = load_model(tiny_gemma3_path, num_threads=1, flash_attention=flash)
    taken = []
    fast = Causal._prepare_decode

    def counted(self, batch):
        hit = fast(self, batch)
        if self.window:
            taken.append(hit)
        return hit

    try:
        runs = []
        for path in (counted, lambda self, batch: False):
            monkeypatch.setattr(Causal, "_prepare_decode", path)
            engine = ForwardEngine(model, num_ctx=256, num_batch=8, parallel=2)
            try:
                assert engine.cache.caches[0].window == 16  # type: ignore[attr-defined]
                runs.append(_window_script(engine))
            finally:
                engine.close()
    finally:
        model.close()
    assert sum(taken) > 140  # the sliding layers' cache took the path
    with_path, without = runs
    assert len(with_path) == len(without)
    for a, b in zip(with_path, without, strict=True):
        assert a.tobytes() == b.tobytes()
