"""Forward passes of one loaded model over its KV cache, with graph reuse.

`ForwardEngine` owns the cache and the core-side half of every pass: it builds the batch's
input tensors, lets the cache assign cells (`prepare`), asks the plugin for the graph, and
computes it. Built graphs are kept and run again when a later pass has the same shape (same
batch size, output rows and cache signature), after their inputs are refilled; that is what
makes token-by-token generation cheap in Python (as llama.cpp's graph reuse does).

At construction it reserves the worst-case graphs (a full batch whose mask spans the whole
cache, and a batch of one), so that a model which does not fit fails here, not mid-inference.
"""

from __future__ import annotations

import io
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .architecture import MultimodalNotSupportedError
from .greedy import GreedyNodes
from .input import Batch, Multimodal, PassInput, sequence_runs
from .kvcache import Cache
from .memory_use import MemoryUse
from .ml.api import Context, OutOfMemoryError
from .ml.tensor import DType, Tensor
from .model import LoadedModel
from .multimodal_store import MultimodalStore, is_placeholder, split_placeholder

__all__ = ["ForwardEngine", "MemoryUse", "Pass"]

_GRAPH_CACHE_SIZE = 4  # graphs kept for reuse (decode shapes, a prompt chunk shape, ...)
# Graphs with lone rows (speculative checks: a draft's length and which sequences draft make
# many shapes) are kept apart, so that checks never evict the decoding graphs between them,
# and more of them, so that a check's shape is mostly built once (a build takes 5-20 ms on
# the default model, about a decoding pass; each graph holds only its nodes' metadata,
# about 3 MB, the compute buffer being the scheduler's).
_CHECK_GRAPH_CACHE_SIZE = 12


@dataclass
class _Graph:
    ctx: Context
    batch: Batch
    output: Tensor
    greedy: GreedyNodes | None = None  # the picks, when made in the graph
    outputs: tuple[Tensor, ...] = ()  # what compute() asks for


@dataclass
class Pass:
    """A planned forward pass: cells assigned, graph ready, token values still changeable.
    `greedy`: run() returns token ids (PassInput.greedy)."""

    graph: _Graph
    tokens: np.ndarray
    greedy: bool = False


class ForwardEngine:
    """See the module docstring. Not thread-safe: one thread builds and runs passes."""

    def __init__(
        self,
        loaded: LoadedModel,
        num_ctx: int = 4096,
        num_batch: int = 512,
        parallel: int = 1,
        kv_dtype: DType = DType.F16,
        memory_limit: int | None = None,
    ) -> None:
        self.loaded = loaded
        self.model = loaded.model
        self.backend = loaded.backend
        self.num_ctx = num_ctx
        self.num_batch = min(num_batch, num_ctx)
        self.parallel = parallel
        self.vocab_size = loaded.tokenizer.vocab_size
        pooling = loaded.file.metadata.uint("pooling_type", 0)
        self.pooling = {1: "mean", 2: "first"}.get(pooling, "last")  # embeddings
        self.model.set_context(num_ctx)
        cache = self.model.make_cache()
        if cache is None:
            raise ValueError("models without a KV cache are not supported yet")
        self.cache: Cache = cache
        self.multimodal = MultimodalStore()
        # (rows, embd) of the largest image, when the model and this file can take images;
        # `vision_whole`: its items come to `forward` whole (Multimodal.positions > 0).
        self.vision_whole = False
        self.vision_item: Multimodal | None = None
        self.vision = self._probe_vision()
        if self.vision is not None and not self.vision_whole and self.vision[0] > self.num_batch:
            # An image's positions attend to each other both ways: they share one batch.
            self.num_batch = min(self.vision[0], num_ctx)
        self.cache.init(self.backend, kv_dtype, parallel, num_ctx, self.num_batch)
        self._graphs: OrderedDict[tuple, _Graph] = OrderedDict()  # built graphs, by shape
        self._check_graphs: OrderedDict[tuple, _Graph] = OrderedDict()  # those with lone rows
        self.graphs_built = 0
        self.graphs_reused = 0
        # Greedy passes pick their tokens in the graph where the logits would otherwise be
        # copied over from a device (greedy.py); on the CPU numpy picks them from the logits.
        self.greedy_on_backend = bool(getattr(self.backend, "output_on_device", False))
        self.memory = self._reserve()
        if memory_limit is not None and self.memory.total > memory_limit:
            raise OutOfMemoryError(
                f"this model needs {_mib(self.memory.total)} (weights {_mib(self.memory.weights)}, "
                f"KV cache {_mib(self.memory.cache)}, compute {_mib(self.memory.graph)}) but only "
                f"{_mib(memory_limit)} is available; try a smaller context length",
                needed=self.memory.total,
                available=memory_limit,
            )

    # -- reservation ----------------------------------------------------------------------
    def _probe_vision(self) -> tuple[int, int] | None:
        """Build (not compute) the encoder graph of a largest-size image and reserve its
        memory; None for a model or file without an image encoder."""
        if not self.model.handles_multimodal():
            return None
        ctx = self.backend.new_context()
        try:
            try:
                items = self.model.encode_multimodal(ctx, _largest_image())
            except MultimodalNotSupportedError:
                return None
            tensors = [item.tensor for item in items if item.tensor is not None]
            ctx.reserve(*tensors)
            rows = sum(t.dim(1) for t in tensors)
            self.vision_whole = any(item.positions for item in items)
            self.vision_item = Multimodal(None, items[0].data, rows=rows, positions=1)
            return rows, tensors[0].dim(0)
        finally:
            ctx.close()

    def _reserve(self) -> MemoryUse:
        for n in (self.num_batch, 1):
            outputs = np.full(min(self.parallel, n), n - 1, dtype=np.int32)
            ctx = self.backend.new_context()
            try:
                media = None
                if self.vision is not None and self.vision_item is not None and self.vision_whole:
                    rows, embd = self.vision  # the largest image, whole
                    item = self.vision_item
                    media = _Media.empty(embd)
                    media.whole.append((0, np.zeros((rows, embd), np.float32), item))
                elif self.vision is not None and n > 1:  # a batch full of image embeddings
                    rows = min(n, self.vision[0])
                    media = _Media(
                        np.arange(rows, dtype=np.int32),
                        np.zeros((rows, self.vision[1]), np.float32),
                        [(0, rows, True)],
                    )
                batch = self._batch(
                    ctx,
                    np.zeros(n, np.int32),
                    np.arange(n, dtype=np.int32),
                    np.zeros(n, np.int32),
                    outputs,
                    media=media,
                )
                self.cache.start_forward(ctx, batch, reserve=True)
                logits = self.model.forward(ctx, batch, self.cache)
                ctx.reserve(logits)
            finally:
                ctx.close()
        return MemoryUse(
            weights=self.loaded.weights.nbytes,
            cache=self.backend.persistent_bytes(),
            graph=self.backend.graph_memory(),
        )

    # -- passes ---------------------------------------------------------------------------
    @staticmethod
    def _batch(
        ctx: Context,
        tokens: np.ndarray,
        positions: np.ndarray,
        sequences: np.ndarray,
        outputs: np.ndarray,
        hidden: bool = False,
        media: _Media | None = None,
    ) -> Batch:
        n = len(tokens)
        batch = Batch(
            tokens=ctx.input(DType.I32, (n,), tokens, key="batch.tokens"),
            positions=ctx.input(DType.I32, (n,), positions, key="batch.positions"),
            outputs=ctx.input(DType.I32, (len(outputs),), outputs, key="batch.outputs"),
            positions_host=positions,
            sequences=sequences,
            outputs_host=outputs,
            hidden=hidden,
        )
        if media is not None and media.whole:
            fresh = not ctx.has_input("batch.mm_whole0")  # a reused graph has its entries
            for i, (row, values, item) in enumerate(media.whole):
                rows, embd = values.shape
                t = ctx.input(DType.F32, (embd, rows), values, key=f"batch.mm_whole{i}")
                if fresh:
                    whole = Multimodal(t, item.data, item.bidirectional, rows, item.positions)
                    whole.token = item.token
                    batch.multimodal.append((row, [whole]))
        if media is not None and len(media.rows):
            m = len(media.rows)
            embd = media.embeddings.shape[1]
            fresh = not ctx.has_input("batch.mm_rows")  # a reused graph has its views
            batch.multimodal_rows = ctx.input(DType.I32, (m,), media.rows, key="batch.mm_rows")
            batch.multimodal_embd = ctx.input(
                DType.F32, (embd, m), media.embeddings, key="batch.mm_embd"
            )
            at = 0
            for start, count, bidirectional in media.runs:
                if fresh:
                    view = ctx.view(
                        batch.multimodal_embd, (embd, count), (embd * 4,), offset=at * embd * 4
                    )
                    batch.multimodal.append((start, [Multimodal(view, None, bidirectional, count)]))
                at += count
            batch.bidirectional = [(s, c) for s, c, both in media.runs if both]
        return batch

    def _media(self, tokens: np.ndarray) -> _Media | None:
        """The multimodal rows of a batch (placeholders, see multimodal_store.py): their
        embeddings, fetched (computed on first use) from the store, in runs per image.
        Items that come whole (`Multimodal.positions` > 0) go to `_Media.whole` at the row
        of their first position, and their positions' tokens are set to the items' tokens
        in `tokens` (in place)."""
        if len(tokens) == 1 and tokens[0] >= 0:  # (decoding: the common case, cheaply)
            return None
        rows = np.flatnonzero(tokens < 0)
        if not len(rows):
            return None
        parts: list[np.ndarray] = []
        runs: list[tuple[int, int, bool]] = []
        spliced: list[np.ndarray] = []
        whole: list[tuple[int, np.ndarray, Multimodal]] = []
        embd = 0
        for start, count in _image_runs(tokens, rows):
            image, first = split_placeholder(int(tokens[start]))
            entry = self.multimodal.info(image)
            if entry is None:
                raise KeyError(f"image {image} is not in the multimodal store")
            embeddings = self.multimodal.embeddings(image)
            embd = embeddings.shape[1]
            if entry.whole:
                whole.extend(_whole_items(entry.items, embeddings, tokens, start, first, count))
                continue
            both = any(item.bidirectional for item in entry.items)
            parts.append(embeddings[first : first + count])
            runs.append((int(start), int(count), both))
            spliced.append(np.arange(start, start + count))
        if not parts:
            media = _Media.empty(embd)
        else:
            at = np.concatenate(spliced).astype(np.int32)
            media = _Media(at, np.concatenate(parts), runs)
        media.whole = whole
        return media

    def replaces_state(self, token: int) -> bool:
        """Whether input `token` is the first position of a whole multimodal item
        (`Multimodal.positions` > 0, e.g. mllama's image): such an item replaces its
        sequence's encoder state, so the batcher keeps the inputs before it, which must still
        see the previous item, out of its pass."""
        if not is_placeholder(token):
            return False
        image, row = split_placeholder(token)
        entry = self.multimodal.info(image)
        return row == 0 and entry is not None and entry.whole

    def plan(self, inputs: PassInput) -> Pass:
        """Assign cache cells and get the graph for one pass (reusing a built one when the
        shapes match). Raises CacheFullError. `Pass.tokens` may be changed before `run()`
        (tokens still being sampled). If the graph may be computing for an earlier pass, call
        this only after that compute has started (its inputs are refilled here)."""
        hidden = inputs.hidden
        tokens = np.array(inputs.tokens, dtype=np.int32)
        media = self._media(tokens)  # sets the tokens of whole items' positions
        if media is not None:
            tokens = np.where(tokens < 0, 0, tokens).astype(np.int32)
        if len(tokens) > self.num_batch:  # the memory reserved at load is for num_batch
            raise ValueError(f"a batch of {len(tokens)} inputs; at most {self.num_batch}")
        positions = np.ascontiguousarray(inputs.positions, dtype=np.int32)
        sequences = np.ascontiguousarray(inputs.sequences, dtype=np.int32)
        outputs = np.ascontiguousarray(inputs.outputs, dtype=np.int32)
        runs = sequence_runs(sequences, inputs.lone_rows)
        host = Batch(None, None, None, positions, sequences, outputs, hidden=hidden, runs=runs)  # type: ignore[arg-type]
        layout: tuple[tuple[int, int], ...] = ()
        if media is not None:
            host.bidirectional = [(s, c) for s, c, both in media.runs if both]
            host.multimodal = [(row, [item]) for row, _, item in media.whole]
            layout = tuple((s, c) for s, c, _ in media.runs)
            layout += tuple((row, -len(values)) for row, values, _ in media.whole)
        self.cache.prepare(host)
        n = len(tokens)
        out_runs = runs if n == 1 else sequence_runs(sequences[outputs], inputs.lone_rows)
        greedy = inputs.greedy and not hidden
        in_graph = greedy and self.greedy_on_backend
        key = (n, len(outputs), hidden, self.cache.signature(), tuple(out_runs), layout, in_graph)
        graphs, size = self._graphs, _GRAPH_CACHE_SIZE
        if inputs.lone_rows:
            graphs, size = self._check_graphs, _CHECK_GRAPH_CACHE_SIZE
        graph = graphs.get(key)
        if graph is not None:
            graphs.move_to_end(key)
            self.graphs_reused += 1
            if media is None:  # (tokens: set by run())
                ctx = graph.ctx
                ctx.input(DType.I32, (n,), positions, key="batch.positions")
                if n > 1:  # (one row: its output is row 0, as when the graph was built)
                    ctx.input(DType.I32, (len(outputs),), outputs, key="batch.outputs")
            else:
                self._batch(graph.ctx, tokens, positions, sequences, outputs, hidden, media)
            self.cache.bind(graph.ctx)
        else:
            ctx = self.backend.new_context()
            ctx.row_groups = {len(tokens): runs, len(outputs): out_runs}
            batch = self._batch(ctx, tokens, positions, sequences, outputs, hidden, media)
            self.cache.bind(ctx)
            out = self.model.forward(ctx, batch, self.cache)
            graph = graphs[key] = _Graph(ctx, batch, out, outputs=(out,))
            if in_graph:
                graph.greedy = GreedyNodes.build(ctx, out)
                graph.outputs = (out, *graph.greedy.outputs)
            self.graphs_built += 1
            while len(graphs) > size:
                _, old = graphs.popitem(last=False)
                old.ctx.close()
        return Pass(graph, tokens, greedy)

    def run(self, p: Pass, on_started: Callable[[], None] | None = None) -> np.ndarray:
        """Compute a planned pass; returns `[n_outputs, vocab]` logits (or hidden states), or
        for a greedy pass `[n_outputs]` int32 token ids."""
        g = p.graph
        g.ctx.input(DType.I32, (len(p.tokens),), p.tokens, key="batch.tokens")
        g.ctx.compute(*g.outputs, on_started=on_started)
        if g.greedy is not None:
            return g.greedy.read(g.output.dim(0), g.output)
        if p.greedy:  # (the logits read in place: only their argmax leaves)
            logits = g.output.numpy(copy=False).reshape(g.batch.n_outputs, -1)
            return logits.argmax(axis=1).astype(np.int32)
        return g.output.numpy().reshape(g.batch.n_outputs, -1)

    def forward(self, inputs: PassInput) -> np.ndarray:
        """plan() and run() in one go; `outputs` are row indices into this batch."""
        return self.run(self.plan(inputs))

    def close(self) -> None:
        for graphs in (self._graphs, self._check_graphs):
            for graph in graphs.values():
                graph.ctx.close()
            graphs.clear()
        self.multimodal.close()
        self.cache.close()


@dataclass
class _Media:
    rows: np.ndarray  # I32 batch rows that take embeddings
    embeddings: np.ndarray  # [len(rows), embd] float32
    runs: list[tuple[int, int, bool]]  # (first row, count, bidirectional) per image
    # (batch row, [rows, embd] float32, the stored item) of items that come whole
    whole: list[tuple[int, np.ndarray, Multimodal]] = field(default_factory=list)

    @classmethod
    def empty(cls, embd: int) -> _Media:
        return cls(np.zeros(0, np.int32), np.zeros((0, embd), np.float32), [])


def _whole_items(
    items: list[Multimodal],
    embeddings: np.ndarray,
    tokens: np.ndarray,
    start: int,
    first: int,
    count: int,
) -> list[tuple[int, np.ndarray, Multimodal]]:
    """The items (of one image) that come whole and whose first position is among the
    batch rows `start .. start + count` (the image's positions `first ..`), each with its
    rows of `embeddings`; sets those positions' `tokens` to the items' tokens."""
    out: list[tuple[int, np.ndarray, Multimodal]] = []
    position, row = 0, 0  # the item's first position in the image, its first embedding row
    for item in items:
        lo, hi = max(position, first), min(position + item.span, first + count)
        if lo < hi:
            tokens[start + lo - first : start + hi - first] = item.token
            if lo == position:
                out.append((start + lo - first, embeddings[row : row + item.rows], item))
        position, row = position + item.span, row + item.rows
    return out


def _largest_image() -> bytes:
    """A 2048x2048 picture: the most a plugin's preprocessing makes of any image (resized to
    the tower's size, or the most tiles)."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (2048, 2048), (128, 128, 128)).save(out, format="PNG")
    return out.getvalue()


def _image_runs(tokens: np.ndarray, rows: np.ndarray) -> list[tuple[int, int]]:
    """(first row, count) of consecutive placeholder rows of one image each."""
    runs: list[tuple[int, int]] = []
    for r in rows.tolist():
        image, row = split_placeholder(int(tokens[r]))
        if runs:
            start, count = runs[-1]
            prev_image, prev_row = split_placeholder(int(tokens[start + count - 1]))
            if start + count == r and prev_image == image and prev_row + 1 == row:
                runs[-1] = (start, count + 1)
                continue
        runs.append((r, 1))
    return runs


def _mib(n: int) -> str:
    mib = n / 2**20
    return f"{mib:,.0f} MiB" if mib >= 100 else f"{mib:.1f} MiB"  # "6 MiB of 6 MiB" says nothing
