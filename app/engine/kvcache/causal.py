"""The cell-based causal cache: plain, sliding-window (with optional extra memory), chunked.

Storage: per layer one K tensor `[head_dim, kv_heads, cells]` and one V tensor, either the same
layout or, when the backend asks for permuted V, `[cells, head_dim, kv_heads]`. Each cell holds
one position of one or more sequences (several after `copy_prefix`). Free cells are taken
anywhere and written with set_rows, so no defragmentation is ever needed.

Bookkeeping is numpy: `cell_pos[c]` (-1 = free) and `cell_seqs[c]`, a bit set of sequence ids
(at most 64 sequences).

Visibility (matching llama.cpp): a token at position p of sequence s sees cell c when c holds
s, cell_pos <= p (causal), p - cell_pos < window (sliding window), and cell_pos lies in p's
chunk (chunked attention).

Batch invariance: each sequence allocates cells in its own region (aligned to the padding),
and attention is computed per run of a sequence's rows over that sequence's cells only
(`get()` returns one view per run). A sequence's numbers are then the same whether it runs
alone or beside others, and the same as llama.cpp's for one sequence.

Stacked decoding: when every run is one row and their first cells are evenly spaced (steady
decoding of several sequences), `get()` returns one 4-D view instead (`KVView.streams`), so
attention is a handful of broadcast ops rather than a handful per sequence. Each stream spans
as many cells as the longest run; a shorter run's extra cells are masked, and because they
come in whole multiples of the padding they only add exact zeros to its sums. That holds only
if the kernels summing over cells take the extra cells in whole SIMD steps, so the backend
chooses the padding by probing them (ml/invariance.py: 32 with AVX2, 64 with AVX-512, where
ggml's F16 dot product steps 64 values and sums a shorter tail on its own). Each stream's
slice is then computed by the same kernels, so its numbers are unchanged (tests compare them
bit for bit with each sequence alone).

Host copies (`snapshot`/`restore`, the prompt cache on disk): a sequence's cells with their
positions and their offsets inside its region, and per layer each cell's K row and V row as
stored (quantized blocks too; a permuted V's elements gathered per cell). `restore` puts them
back at the same offsets of the target sequence's region, so attention sums over the cells in
the same order as before: the numbers are those of the sequence that was saved. A sliding
window saves only the cells it still holds. A sequence holding cells of other regions
(`copy_prefix`) is not saved.
"""

from __future__ import annotations

import numpy as np

from ..input import Batch, sequence_runs
from ..ml.api import Backend, CacheConfig, Context
from ..ml.nn import KVView
from ..ml.tensor import DType, Tensor
from .base import MAX_POS, Cache, CacheFullError, SequenceState, ShiftFn, ShiftNotSupportedError
from .decode import DecodeState, Group, round_up

__all__ = ["Causal", "MASK_ROW_PADDING"]

MASK_ROW_PADDING = 32  # ggml's GGML_KQ_MASK_PAD: mask rows are padded to this for flash attention
MAX_SEQUENCES = 64
_BITS = [np.uint64(1) << np.uint64(i) for i in range(MAX_SEQUENCES)]  # sequence i's bit


class Causal(Cache):
    """See the module docstring.

    window: sliding-window size in positions (0 = attend to everything).
    memory: positions kept per sequence for a sliding window (>= window); more memory lets a
        follow-up prompt resume instead of reprocessing. None = the window plus one batch.
    chunk: chunked attention (llama4 style) chunk size (0 = off).
    shift: re-RoPE function used by remove(); None = the cache cannot shift.
    """

    def __init__(
        self,
        shift: ShiftFn | None = None,
        window: int = 0,
        memory: int | None = None,
        chunk: int = 0,
    ) -> None:
        self.shift_fn = shift
        self.window = window
        self.memory = memory
        self.chunk = chunk
        self._config: CacheConfig | None = None
        self._config_set = False
        self._backend: Backend | None = None
        self._keys: dict[int, Tensor] = {}
        self._values: dict[int, Tensor] = {}
        self._layer = 0
        self.cells = 0
        self._key = f"kv{id(self):x}."  # names this cache's graph inputs
        self._shared: set[int] = set()  # sequences given cells of other regions
        self._seen: set[int] = set()  # sequences that have allocated cells
        self._v_row_dims: set[int] = set()
        self._v_row_starts: dict[int, np.ndarray] = {}
        self._stride = 0  # cells between stacked runs' first cells; 0 = not stacked
        # The last pass's sliding-window releases: (sequence, the position of the run that
        # let them go, cells, their positions then), for `reject`.
        self._released: list[tuple[int, int, np.ndarray, np.ndarray]] = []
        # Single-token decoding's fast path (decode.py): per sequence its last lone row's
        # state, valid while `_epoch` holds (bumped by edits between passes; a pass drops
        # the states of the sequences it places).
        self._epoch = 0
        self._decode: dict[int, DecodeState] = {}
        # Sequences a pass without them slid (`_slide_absent`) at this epoch, not placed
        # since: sliding them again would let nothing go.
        self._settled: dict[int, int] = {}

    # -- configuration --------------------------------------------------------------------
    def set_config(self, config: CacheConfig) -> None:
        if self._config_set:
            raise RuntimeError("cache config set twice")
        self._config = config
        self._config_set = True

    def init(
        self,
        backend: Backend,
        dtype: DType,
        max_sequences: int,
        capacity: int,
        max_batch: int,
    ) -> None:
        if max_sequences > MAX_SEQUENCES:
            raise ValueError(f"at most {MAX_SEQUENCES} parallel sequences are supported")
        if self._config is None:
            self._config = backend.cache_config
        self._backend = backend
        self.dtype = dtype
        self.max_sequences = max_sequences
        self.capacity = capacity
        self.max_batch = max_batch
        if self.window:
            # By default keep a batch's worth beyond the window: a follow-up prompt that
            # diverges up to that far back from the end can still resume instead of being
            # evaluated from the start (Ollama's gemma3 pain point).
            mem = self.memory or self.window + max_batch
            if max_sequences > 1:
                # The stop token is stored but is not part of the next prompt: keep one more
                # than the window - 1 positions a token needs before it.
                mem = max(mem, self.window)
            self.swa_memory = mem
            per_sequence = min(capacity, mem + max_batch)
        else:
            self.swa_memory = 0
            per_sequence = capacity
        # Each sequence allocates in its own region, aligned to the padding: a sequence's
        # cells then sit at the same offsets whatever else shares the batch, so its numbers
        # do not depend on the others (SIMD sums group cells by their index).
        self.region = round_up(per_sequence, self._config.padding)
        self.cells = self.region * max_sequences
        self.cell_pos = np.full(self.cells, -1, dtype=np.int64)
        self.cell_seqs = np.zeros(self.cells, dtype=np.uint64)
        self._epoch += 1
        # Per sequence: every cell of its region from this offset on is free (an upper bound
        # on what it uses), so a pass scans what the sequence holds, not the whole region.
        self._used = [0] * max_sequences

    @property
    def permuted_v(self) -> bool:
        assert self._config is not None
        return self._config.permuted_v

    def close(self) -> None:
        self._keys.clear()
        self._values.clear()

    # -- per forward pass -----------------------------------------------------------------
    def prepare(self, batch: Batch, reserve: bool = False) -> None:
        n = batch.size
        if n == 1 and not reserve and self._prepare_decode(batch):
            return
        if reserve:
            # The worst case: one sequence's whole region seen by a full batch.
            locs = np.arange(n, dtype=np.int64) % self.cells
            mask = np.zeros((self._mask_rows(n), self.region), np.float32)
            self._groups = [Group(0, n, 0, self.region, mask)]
        else:
            positions = batch.positions_host.astype(np.int64)
            seqs = batch.sequences
            runs = batch.runs or sequence_runs(seqs)
            locs = np.empty(n, dtype=np.int64)
            self._released = []
            for start, _ in runs:  # (other sequences' cells stay as they are)
                self._decode.pop(int(seqs[start]), None)
                self._settled.pop(int(seqs[start]), None)
            if self.window:
                self._slide_absent({int(seqs[start]) for start, _ in runs})
            for start, count in runs:
                self._allocate(int(seqs[start]), positions[start : start + count], locs, start)
            spans = [(int(positions[s]), int(positions[s + c - 1])) for s, c in batch.bidirectional]
            self._groups = [
                self._group(start, count, positions[start : start + count], int(seqs[start]), spans)
                for start, count in runs
            ]
        self._locs_host = locs.astype(np.int32)
        self._batch_size = n
        self._stride = self._stack_stride()
        if n == 1 and not reserve:
            self._record_decode(batch)

    def _prepare_decode(self, batch: Batch) -> bool:
        """The single-token fast path (decode.py); False where it does not apply."""
        if batch.bidirectional:
            return False
        seq = int(batch.sequences[0])
        state = self._decode.get(seq)
        if (
            state is None
            or state.epoch != self._epoch
            or int(batch.positions_host[0]) != state.position + 1
            or self._used[seq] != state.used
            or not state.room()
        ):
            return False
        if self.window:
            self._slide_absent({seq})
        self._settled.pop(seq, None)
        bit = _BITS[seq]
        cell, dropped, moved = state.advance(self.cell_pos, self.cell_seqs, bit)
        position = state.position
        if moved:
            lo, hi = state.span()
            mask = self._mask(np.array([position]), bit, lo, hi)
            state.group = Group(0, 1, lo, hi - lo, mask)
        self._used[seq] = state.used
        self._released = []
        if dropped >= 0:  # as `_allocate` journals it
            gone = np.array([position - 1 - self.swa_memory], dtype=np.int64)
            self._released.append((seq, position, np.array([dropped], dtype=np.int64), gone))
        self._groups = [state.group]
        self._locs_host = np.array([cell], dtype=np.int32)
        self._batch_size = 1
        self._stride = 0
        return True

    def _record_decode(self, batch: Batch) -> None:
        """After the general path prepared a lone row: keep its state for the next token's
        fast path when that path applies (decode.py)."""
        seq = int(batch.sequences[0])
        self._decode.pop(seq, None)
        if self.chunk or batch.bidirectional or seq in self._shared:
            return
        bit = _BITS[seq]
        base, used = seq * self.region, self._used[seq]
        owners = self.cell_seqs[base : base + used]
        if self.window and ((owners != 0) & (owners != bit)).any():
            return  # another sequence's drops could free cells of this region
        held = np.flatnonzero(owners & bit) + base
        free = (np.flatnonzero(owners == 0) + base).tolist()  # (ascending: a heap)
        state = DecodeState.record(
            self._epoch, int(batch.positions_host[0]), self._groups[0], base, self.region,
            used, self._config.padding, held, self.cell_pos[held], free,  # type: ignore[union-attr]
            self.window, self.swa_memory,
        )  # fmt: skip
        if state is not None:
            self._decode[seq] = state

    @property
    def stacked(self) -> bool:
        """Whether the prepared pass attends through one stacked view (module docstring)."""
        return self._stride > 0

    def _stack_stride(self) -> int:
        """Cells between consecutive runs' first cells when the runs can be attended to as
        one stacked view (see the module docstring), else 0."""
        groups = self._groups
        if len(groups) < 2 or self._config.mask_dtype == DType.F16:  # type: ignore[union-attr]
            return 0  # one run, or flash attention (which takes the per-run path)
        stride = groups[1].first_cell - groups[0].first_cell
        if stride <= 0:
            return 0
        for i, g in enumerate(groups):
            if g.count != 1 or g.first_cell != groups[0].first_cell + i * stride:
                return 0
        if groups[-1].first_cell + self._stacked_n_kv() > self.cells:
            return 0
        return stride

    def _stacked_n_kv(self) -> int:
        """Cells each stream of a stacked view spans: the longest run's. A shorter run's
        extra cells are masked; as they are whole multiples of the padding, its sums only
        gain exact zeros, so its numbers do not change."""
        return max(g.n_kv for g in self._groups)

    def _allocate(self, seq: int, positions: np.ndarray, locs: np.ndarray, start: int) -> None:
        """Cells for one run of a sequence's rows, taken first-free in the sequence's region
        (after the sliding window let go of what no later token can see)."""
        bit = _BITS[seq]
        base = seq * self.region
        used = self._used[seq]
        if self.window:
            mine = self._held_cells(seq)
            cells = mine[self.cell_pos[mine] < int(positions.min()) - self.swa_memory]
            if len(cells):
                # Journaled for `reject` (the undo of a rejected draft's rows).
                self._released.append((seq, int(positions.min()), cells, self.cell_pos[cells]))
                self._drop_slid(seq, cells)
        count = len(positions)
        # The first `count` free cells of the region lie below used + count (all free above).
        span = min(self.region, used + count)
        free = np.flatnonzero(self.cell_seqs[base : base + span] == 0)
        if len(free) < count:
            raise CacheFullError()
        cells = free[:count] + base
        locs[start : start + count] = cells
        self.cell_pos[cells] = positions
        self.cell_seqs[cells] = bit
        self._used[seq] = max(used, int(free[count - 1]) + 1)
        self._seen.add(seq)

    def _held_cells(self, seq: int) -> np.ndarray:
        """The cells `seq` holds: in its region, or anywhere once it shares cells of another
        sequence's region (copy_prefix)."""
        bit = _BITS[seq]
        if seq in self._shared:
            return np.flatnonzero(self.cell_seqs & bit)
        base = seq * self.region
        return np.flatnonzero(self.cell_seqs[base : base + self._used[seq]] & bit) + base

    def _drop_slid(self, seq: int, cells: np.ndarray) -> None:
        """`seq` lets go of `cells` its window has passed. Where some lie in another region (a
        shared prefix), that region's cells changed under its own sequence: its decoding
        state (decode.py) no longer holds, so the epoch moves on."""
        self._drop(cells, _BITS[seq])
        base = seq * self.region
        if seq in self._shared and ((cells < base) | (cells >= base + self.region)).any():
            self._epoch += 1

    def _slide_absent(self, present: set[int]) -> None:
        """Sequences missing from this batch move on too: their next position is their last
        plus one, so cells behind the window's memory from there go (Ollama does the same).
        A sequence with a decoding state lets go of at most one cell, found in its ring."""
        for seq in self._seen - present:
            if self._settled.get(seq) == self._epoch:
                continue
            self._settled[seq] = self._epoch
            bit = _BITS[seq]
            state = self._decode.get(seq)
            if state is not None and state.epoch == self._epoch:
                cell = state.slid_cell()
                gone = state.position - self.swa_memory
                if cell >= 0 and self.cell_pos[cell] == gone and self.cell_seqs[cell] == bit:
                    self.cell_pos[cell] = -1  # (the state's region is the sequence's alone)
                    self.cell_seqs[cell] = 0
                continue
            mine = self._held_cells(seq)
            if not len(mine):
                continue
            lowest = int(self.cell_pos[mine].max()) + 1
            self._drop_slid(seq, mine[self.cell_pos[mine] < lowest - self.swa_memory])

    def _group(
        self,
        start: int,
        count: int,
        positions: np.ndarray,
        seq: int,
        spans: list[tuple[int, int]] = (),  # type: ignore[assignment]
    ) -> Group:
        """The cells a run of one sequence's rows attends to, from the padding boundary below
        its first cell to the one above its last, with the run's mask. `spans`: position
        ranges (first, last) whose rows also see each other's later positions (an image)."""
        pad = self._config.padding  # type: ignore[union-attr]
        bit = _BITS[seq]
        if seq in self._shared:  # holds cells of other regions (copy_prefix)
            mine = np.flatnonzero(self.cell_seqs & bit)
        else:
            base = seq * self.region
            mine = np.flatnonzero(self.cell_seqs[base : base + self._used[seq]] & bit) + base
        lo = int(mine[0]) // pad * pad
        hi = min(self.cells, round_up(int(mine[-1]) + 1, pad))
        return Group(start, count, lo, hi - lo, self._mask(positions, bit, lo, hi, spans))

    def _mask_rows(self, n: int) -> int:
        # Flash attention wants the rows padded; soft_max takes them as they are.
        flash = self._config.mask_dtype == DType.F16  # type: ignore[union-attr]
        return round_up(n, MASK_ROW_PADDING) if flash else n

    def signature(self) -> tuple[int, ...]:
        shape = [self._batch_size]
        if self._stride:  # the graph depends only on the stack's geometry
            first = self._groups[0].first_cell
            return (*shape, -1, len(self._groups), self._stride, first, self._stacked_n_kv())
        for g in self._groups:
            shape += [g.start, g.count, g.first_cell, g.n_kv]
        return tuple(shape)

    def bind(self, ctx: Context) -> None:
        key = self._key
        self._locs = ctx.input(DType.I32, (self._batch_size,), self._locs_host, key=key + "locs")
        mask_dtype = self._config.mask_dtype  # type: ignore[union-attr]
        if self._stride:
            n_kv, streams = self._stacked_n_kv(), len(self._groups)
            stacked = np.full((streams, 1, n_kv), -np.inf, dtype=np.float32)
            for i, g in enumerate(self._groups):
                stacked[i, 0, : g.n_kv] = g.mask[0]
            shape = (n_kv, 1, 1, streams)
            self._masks = [ctx.input(mask_dtype, shape, stacked, key=f"{key}mask_stacked")]
        else:
            self._masks = [
                ctx.input(mask_dtype, (g.n_kv, g.mask.shape[0]), g.mask, key=f"{key}mask{i}")
                for i, g in enumerate(self._groups)
            ]
        for dv in self._v_row_dims:
            if ctx.has_input(key + f"vrows{dv}"):
                self._v_rows_input(ctx, dv)

    def _v_rows_input(self, ctx: Context, dv: int) -> Tensor:
        """Row indices for writing permuted V: element (t, d) goes to d * cells + loc[t]."""
        starts = self._v_row_starts.get(dv)
        if starts is None:  # d * cells for each d, once per width
            starts = self._v_row_starts[dv] = (np.arange(dv) * self.cells).astype(np.int32)
        locs = self._locs_host
        # (int32: cells * dv < 2**31; one row, decoding's case, without the broadcast)
        rows = starts + locs[0] if len(locs) == 1 else (starts[None, :] + locs[:, None]).ravel()
        self._v_row_dims.add(dv)
        n = self._batch_size * dv
        return ctx.input(DType.I32, (n,), rows, key=self._key + f"vrows{dv}")

    def _mask(
        self,
        positions: np.ndarray,
        bit: np.uint64,
        lo: int,
        hi: int,
        spans: list[tuple[int, int]] = (),  # type: ignore[assignment]
    ) -> np.ndarray:
        cp = self.cell_pos[lo:hi][None, :]
        mine = ((self.cell_seqs[lo:hi] & bit) != 0)[None, :]
        tp = positions[:, None]
        visible = mine & (cp <= tp) & (cp >= 0)
        if self.window:
            visible &= (tp - cp) < self.window
        if self.chunk:
            visible &= cp >= tp - tp % self.chunk
        for first, last in spans:  # an image's rows see all of it, whatever the window
            inside = (tp >= first) & (tp <= last)
            visible |= inside & mine & (cp >= first) & (cp <= last)
        mask = np.full((self._mask_rows(len(positions)), hi - lo), -np.inf, dtype=np.float32)
        mask[: len(positions)][visible] = 0.0
        return mask

    def _drop(self, cells: np.ndarray, bit: np.uint64) -> None:
        """Take the sequence `bit` off the cells (indices); cells nobody holds become free."""
        self.cell_seqs[cells] &= ~bit
        empty = cells[self.cell_seqs[cells] == 0]
        self.cell_pos[empty] = -1

    def set_layer(self, layer: int) -> None:
        self._layer = layer

    def _storage(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        layer = self._layer
        if layer not in self._keys:
            assert self._backend is not None
            dk, hk = key.dim(0), key.dim(1)
            dv, hv = value.dim(0), value.dim(1)
            self._keys[layer] = self._backend.persistent(
                self.dtype, (dk, hk, self.cells), f"cache_k_l{layer}"
            )
            vshape = (self.cells, dv, hv) if self.permuted_v else (dv, hv, self.cells)
            self._values[layer] = self._backend.persistent(self.dtype, vshape, f"cache_v_l{layer}")
        return self._keys[layer], self._values[layer]

    def put(self, ctx: Context, key: Tensor, value: Tensor) -> None:
        n = self._batch_size
        if key.dim(2) != n:
            raise ValueError(f"put(): batch of {key.dim(2)} but start_forward had {n}")
        keys, values = self._storage(key, value)
        dk = key.dim(0) * key.dim(1)
        k_rows = ctx.reshape(keys, dk, self.cells)
        ctx.forward(ctx.set_rows(k_rows, ctx.reshape(key, dk, n), self._locs))
        dv = value.dim(0) * value.dim(1)
        if self.permuted_v:
            # Each element of V is its own row (see _v_rows_input).
            idx = self._v_rows_input(ctx, dv)
            flat = ctx.reshape(values, 1, self.cells * dv)
            ctx.forward(ctx.set_rows(flat, ctx.reshape(value, 1, n * dv), idx))
        else:
            v_rows = ctx.reshape(values, dv, self.cells)
            ctx.forward(ctx.set_rows(v_rows, ctx.reshape(value, dv, n), self._locs))

    def get(self, ctx: Context) -> list[KVView]:
        keys = self._keys[self._layer]
        values = self._values[self._layer]
        if self._stride:
            return [self._stacked_view(ctx, keys, values)]
        views = []
        for g, mask in zip(self._groups, self._masks, strict=True):
            k = ctx.view(
                keys,
                (keys.dim(0), keys.dim(1), g.n_kv),
                keys.strides[1:3],
                g.first_cell * keys.strides[2],
            )
            if self.permuted_v:
                shape = (g.n_kv, values.dim(1), values.dim(2))
                offset = g.first_cell * values.strides[0]
            else:
                shape = (values.dim(0), values.dim(1), g.n_kv)
                offset = g.first_cell * values.strides[2]
            v = ctx.view(values, shape, values.strides[1:3], offset)
            views.append(KVView(g.start, g.count, k, v, mask))
        return views

    def _stacked_view(self, ctx: Context, keys: Tensor, values: Tensor) -> KVView:
        """All runs as one 4-D view: stream i is run i (batch row i), its cells start at
        first_cell + i * stride."""
        first, n_kv, streams = self._groups[0].first_cell, self._stacked_n_kv(), len(self._groups)
        step = self._stride * keys.strides[2]
        k = ctx.view(
            keys, (keys.dim(0), keys.dim(1), n_kv, streams), (*keys.strides[1:3], step),
            first * keys.strides[2],
        )  # fmt: skip
        if self.permuted_v:
            shape = (n_kv, values.dim(1), values.dim(2), streams)
            cell = values.strides[0]
        else:
            shape = (values.dim(0), values.dim(1), n_kv, streams)
            cell = values.strides[2]
        v = ctx.view(values, shape, (*values.strides[1:3], self._stride * cell), first * cell)
        return KVView(0, streams, k, v, self._masks[0], streams=streams)

    # -- sequence edits -------------------------------------------------------------------
    def remove(self, seq: int, begin: int, end: int = MAX_POS) -> None:
        self._epoch += 1
        bit = _BITS[seq]
        mine = (self.cell_seqs & bit) != 0
        gone = mine & (self.cell_pos >= begin) & (self.cell_pos < end)
        later = mine & (self.cell_pos >= end)
        if end != MAX_POS and later.any():
            if (self.cell_seqs[later] != bit).any():
                raise ShiftNotSupportedError("cannot shift positions shared with another sequence")
            if self.shift_fn is None:
                raise ShiftNotSupportedError()
        self._drop(np.flatnonzero(gone), bit)
        if not (self.cell_seqs & bit).any():
            self._shared.discard(seq)
        self._lower_bound(seq)
        if end != MAX_POS and later.any():
            delta = np.zeros(self.cells, dtype=np.int32)
            delta[later] = begin - end
            self.cell_pos[later] += begin - end
            self._shift(delta)

    def _lower_bound(self, seq: int) -> None:
        """After cells were dropped: the region's scan bound comes down to just above its
        highest held cell (held by any sequence: copy_prefix shares cells). Which cells the
        next rows take does not change (the first free ones either way); every scan of the
        region (`_allocate`, `_group`, `_held_cells`) and the decoding state's heap of free
        cells below the bound (decode.py) then cover only what the slot holds now, not what
        an earlier, longer request held."""
        base = seq * self.region
        held = np.flatnonzero(self.cell_seqs[base : base + self._used[seq]])
        self._used[seq] = int(held[-1]) + 1 if len(held) else 0

    def reject(self, seq: int, begin: int) -> None:
        """`Cache.reject`: with a sliding window, each lone row of a speculative check let go
        of the cells behind the window's memory from its own position as it took its cell,
        as decoding does. Rows rejected after the pass must not have let go of anything: the
        cells they released are held again (at their old positions; a rejected row may have
        overwritten one, but a position that far behind is masked for every later token, as
        the window's memory (at least the window plus a batch) exceeds the window by more
        than a draft), so the next token takes the cell it takes without speculation: cell
        order is summation order, and a different one changes the numbers."""
        self.remove(seq, begin)
        bit = np.uint64(1) << np.uint64(seq)
        base = seq * self.region
        for owner, at, cells, positions in reversed(self._released):
            if owner != seq or at < begin:
                continue
            free = self.cell_seqs[cells] == 0
            self.cell_seqs[cells[free]] = bit
            self.cell_pos[cells[free]] = positions[free]
            own = cells[free & (cells >= base) & (cells < base + self.region)]
            if len(own):  # the scan bound covers the cells held again (in its own region)
                self._used[seq] = max(self._used[seq], int(own.max()) - base + 1)
        self._released = [r for r in self._released if r[0] != seq]

    def _shift(self, delta: np.ndarray) -> None:
        assert self._backend is not None and self.shift_fn is not None
        if not self._keys:
            return
        ctx = self._backend.new_context()
        try:
            d = ctx.input(DType.I32, (self.cells,), delta)
            outs = []
            for layer, keys in self._keys.items():
                shifted = self.shift_fn(ctx, layer, keys, d)
                outs.append(ctx.copy(shifted, keys))
            ctx.forward(*outs)
            ctx.compute(*outs)
        finally:
            ctx.close()

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        self._epoch += 1
        dbit = _BITS[dst]
        self._drop(np.flatnonzero(self.cell_seqs & dbit), dbit)
        sbit = _BITS[src]
        share = ((self.cell_seqs & sbit) != 0) & (self.cell_pos < length)
        self.cell_seqs[share] |= dbit
        if share.any() and src != dst:
            self._shared.add(dst)

    def can_resume(self, seq: int, pos: int) -> bool:
        if not self.window:
            return True
        bit = _BITS[seq]
        mine = (self.cell_seqs & bit) != 0
        if not mine.any():
            return pos == 0
        first = int(self.cell_pos[mine].min())
        last = int(self.cell_pos[mine].max())
        # The token at `pos` sees positions > pos - window (see the module docstring).
        return max(0, pos - self.window + 1) >= first and pos <= last + 1

    def positions(self, seq: int) -> np.ndarray:
        """The positions `seq` holds, sorted (for tests and diagnostics)."""
        bit = _BITS[seq]
        return np.sort(self.cell_pos[(self.cell_seqs & bit) != 0])

    # -- host copies ----------------------------------------------------------------------
    def snapshot(self, seq: int, length: int) -> SequenceState | None:
        if seq in self._shared or not self._keys:
            return None
        bit = _BITS[seq]
        base = seq * self.region
        region = slice(base, base + self.region)
        mine = np.flatnonzero(self.cell_seqs[region] & bit) + base
        cells = mine[(self.cell_pos[mine] >= 0) & (self.cell_pos[mine] < length)]
        if not len(cells):
            return None
        positions = self.cell_pos[cells]
        arrays = {"pos": positions.astype(np.int32), "cell": (cells - base).astype(np.int32)}
        lo, hi = int(cells[0]), int(cells[-1]) + 1
        for layer, keys in self._keys.items():
            arrays[f"k{layer}"] = self._read_rows(keys, cells, lo, hi)
            arrays[f"v{layer}"] = self._read_v(self._values[layer], cells, lo, hi)
        first = int(positions.min())
        resume_from = first + self.window - 1 if self.window and first > 0 else 0
        return SequenceState(arrays, resume_from)

    def _read_rows(self, t: Tensor, cells: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """`[cells, row bytes]` of a `[.., .., cells]` tensor (one row of bytes per cell)."""
        row = t.strides[2]
        span = t.read_bytes(lo * row, (hi - lo) * row).reshape(hi - lo, row)
        return span[cells - lo]

    def _read_v(self, values: Tensor, cells: np.ndarray, lo: int, hi: int) -> np.ndarray:
        if not self.permuted_v:
            return self._read_rows(values, cells, lo, hi)
        # [cells, dv, hv]: element d of cell c sits at d * cells + c.
        size = values.strides[0]
        rows = values.dim(1) * values.dim(2)
        span = values.read_bytes(lo * size, ((rows - 1) * self.cells + hi - lo) * size)
        grid = np.lib.stride_tricks.as_strided(
            span, (rows, hi - lo, size), (self.cells * size, size, 1), writeable=False
        )
        return np.ascontiguousarray(grid[:, cells - lo].transpose(1, 0, 2)).reshape(
            len(cells), rows * size
        )

    def restore(self, seq: int, state: SequenceState) -> bool:
        self._epoch += 1
        arrays = state.arrays
        bit = _BITS[seq]
        base = seq * self.region
        try:
            positions = arrays["pos"].astype(np.int64)
            offsets = arrays["cell"].astype(np.int64)
        except KeyError:
            return False
        n = len(offsets)
        if (
            n == 0
            or len(positions) != n
            or offsets.min() < 0
            or offsets.max() >= self.region
            or len(np.unique(offsets)) != n
            or positions.min() < 0
            or set(arrays) != {"pos", "cell"} | {f"{kv}{i}" for i in self._keys for kv in "kv"}
        ):
            return False
        cells = base + offsets
        if (self.cell_seqs & bit).any() or (self.cell_pos[cells] != -1).any():
            return False
        for layer, keys in self._keys.items():
            k, v = arrays[f"k{layer}"], arrays[f"v{layer}"]
            values = self._values[layer]
            v_row = (
                values.dim(1) * values.dim(2) * values.strides[0]
                if self.permuted_v
                else (values.strides[2])
            )
            if k.shape != (n, keys.strides[2]) or v.shape != (n, v_row):
                return False
        order = np.argsort(cells)
        cells, positions = cells[order], positions[order]
        runs = np.split(np.arange(n), np.flatnonzero(np.diff(cells) != 1) + 1)
        for layer, keys in self._keys.items():
            k = arrays[f"k{layer}"][order]
            v = arrays[f"v{layer}"][order]
            values = self._values[layer]
            for run in runs:
                first = int(cells[run[0]])
                keys.write_bytes(first * keys.strides[2], k[run])
                self._write_v(values, first, v[run])
        self.cell_pos[cells] = positions
        self.cell_seqs[cells] |= bit
        self._used[seq] = max(self._used[seq], int(cells[-1]) - base + 1)
        self._seen.add(seq)
        return True

    def _write_v(self, values: Tensor, first: int, rows: np.ndarray) -> None:
        """Write the V rows of consecutive cells from `first` (the inverse of `_read_v`)."""
        if not self.permuted_v:
            values.write_bytes(first * values.strides[2], rows)
            return
        size = values.strides[0]
        elements = rows.reshape(len(rows), -1, size)
        for d in range(elements.shape[1]):
            values.write_bytes((d * self.cells + first) * size, elements[:, d])
