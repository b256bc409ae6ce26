"""`LlamaCppEngine`: one llama.cpp model and context with the passes of `ForwardEngine`
(`plan(PassInput)`, `run`, `forward`; see `hearth.runner.engine.Passes`).

* One context holds every sequence: `n_seq_max = parallel`, and a KV cache of `num_ctx` cells
  per sequence, each sequence in a stream of its own (`kv_unified` off, as llama-server with
  `--parallel N`). In a unified cache every sequence attends over every used cell, masked or
  not, so the prompts other slots keep for reuse would slow each pass down (measured: 10 %
  on a 480-token prompt beside four cached conversations). Sharing a prefix between slots
  (`copy_prefix`) copies the source stream, then drops what follows the prefix; llama.cpp
  copies across streams only whole. Slot id == llama.cpp sequence id.
* `plan()` only records the batch (llama.cpp builds and reuses its graphs itself); `run()`
  fills a `llama_batch` with per-row sequence ids and output flags, calls `llama_decode` and
  returns the wanted rows of logits, or of the final normed hidden states (`hidden=True`: the
  context runs with pooling NONE, and the loop pools per the file, as with Hearth's engine).
* The memory report is llama.cpp's own: the model size (`llama_model_size`) and the KV and
  compute buffers it logs while creating the context (the KV formula when the log lacks it).
* Images (`projector`: the model's mmproj file): llama.cpp's mtmd encodes them (`vision.py`);
  their rows arrive as placeholders, and `run()` decodes each image's rows as a batch of
  embeddings of its own (non-causal where mtmd says so), the text rows around them as tokens.
  M-RoPE models (Qwen2-VL and kin) give an image's embeddings grid positions and the image
  fewer positions than rows: `positions.MRopePositions` maps the loop's positions onto
  llama.cpp's, in the passes and in the cache edits (no context shift for those).
* Where layers go is the service's layout (`placement`), mapped to llama.cpp's
  `n_gpu_layers`/`tensor_split` by `layout.py`; without one, weights stay on the CPU
  (`n_gpu_layers = 0`). A layout this llama.cpp cannot follow fails the load with a sentence.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine.cpu_turns import CpuTurns, turns_from_env
from ..engine.input import PassInput
from ..engine.kvcache import CacheFullError, KVCacheType
from ..engine.memory_use import MemoryUse
from ..engine.ml.api import OutOfMemoryError
from ..engine.ml.placement import DevicePlacement
from ..engine.multimodal_store import split_placeholder
from .batch import LlamaBatch, LogitsView, segments
from .buffers import device_parts, parse_buffers
from .layout import LlamaCppLayoutError, LlamaCppSplit, llamacpp_devices, llamacpp_split
from .library import LlamaCppLoadError, LlamaCppLog, library, load_failure
from .positions import MRopePositions
from .sequence_cache import SequenceCache
from .tokenizer import LlamaCppTokenizer
from .vision import MtmdVision, VisionLoadError

__all__ = ["LlamaCppEngine", "LlamaCppPass"]

_POOLING = {1: "mean", 2: "first"}  # the file's pooling_type, as Hearth's engine reads it


@dataclass
class LlamaCppPass:
    """A planned pass (see `ForwardEngine.plan`): `tokens` may change until `run()`."""

    tokens: np.ndarray
    positions: np.ndarray
    sequences: np.ndarray
    outputs: np.ndarray
    hidden: bool
    greedy: bool = False  # run() returns token ids (PassInput.greedy)


class LlamaCppEngine:
    """See the module docstring. Not thread-safe: one thread plans and runs passes."""

    def __init__(
        self,
        path: str,
        *,
        num_ctx: int = 4096,
        num_batch: int = 512,
        parallel: int = 1,
        threads: int | None = None,
        flash_attention: bool = False,
        kv_type: str = "f16",
        memory_limit: int | None = None,
        progress: Callable[[float], None] | None = None,
        projector: str | None = None,
        placement: DevicePlacement | None = None,
    ) -> None:
        lib, log = library()
        self._lib = lib
        self.num_ctx = num_ctx
        self.num_batch = min(num_batch, num_ctx)
        self.parallel = parallel
        self.threads = threads or _default_threads()
        self.model, self.ctx = 0, 0
        self._batch: LlamaBatch | None = None
        self._embd_batch: LlamaBatch | None = None
        self.vision: MtmdVision | None = None
        self._turns: CpuTurns | None = None
        self.devices: dict[str, dict[str, int]] = {}  # bytes per device and part (_memory)
        start = log.mark()
        self.split = _split(lib, path, placement or DevicePlacement())
        # On the CPU alone, a turn per decode beside the service's other runners (cpu_turns.py)
        cpu_only = placement is None or placement.cpu_only
        self._turns = turns_from_env() if cpu_only else None
        self.model = self._load_model(path, progress, log, start)
        try:
            self._init_context(flash_attention, kv_type)
            self.memory = self._memory(log.buffers_since(start), kv_type)
            if memory_limit is not None and self.memory.total > memory_limit:
                raise OutOfMemoryError(
                    f"this model needs {_mib(self.memory.total)} (weights "
                    f"{_mib(self.memory.weights)}, KV cache {_mib(self.memory.cache)}, compute "
                    f"{_mib(self.memory.graph)}) but only {_mib(memory_limit)} is available; "
                    "try a smaller context length",
                    needed=self.memory.total,
                    available=memory_limit,
                )
            self.tokenizer = LlamaCppTokenizer(lib, lib.llama_model_get_vocab(self.model))
            self.vocab_size = self.tokenizer.vocab_size
            self.n_embd = int(lib.llama_model_n_embd(self.model))
            self.cache = SequenceCache(lib, self.ctx, self.model)
            self.architecture = self.meta("general.architecture") or "unknown"
            self.context_length = int(self.meta(f"{self.architecture}.context_length") or 0)
            pooling = int(self.meta(f"{self.architecture}.pooling_type") or 0)
            self.pooling: str = _POOLING.get(pooling, "last")
            self._batch = LlamaBatch(lib, self.num_batch, 0)
            self._logits = LogitsView(lib, self.vocab_size)
            if projector:
                try:
                    on_gpu = placement is not None and placement.projector is not None
                    self.vision = MtmdVision(lib, self.model, projector, self.threads, on_gpu)
                except VisionLoadError as e:
                    raise LlamaCppLoadError(str(e)) from None
                # M-RoPE: four positions per embedding (t, y, x, z; see vision.py)
                per_row = 4 if self.vision.mrope else 1
                self._embd_batch = LlamaBatch(lib, self.num_batch, self.vision.n_embd, per_row)
                if self.vision.mrope:
                    self.cache.positions = MRopePositions()
        except BaseException:
            self.close()
            raise

    # -- loading --------------------------------------------------------------------------
    def _load_model(
        self, path: str, progress: Callable[[float], None] | None, log: LlamaCppLog, start: int
    ) -> int:
        lib = self._lib
        params = lib.llama_model_default_params()
        split = self.split
        params.n_gpu_layers = split.n_gpu_layers
        params.split_mode = getattr(lib, f"LLAMA_SPLIT_MODE_{split.split_mode.upper()}")
        params.main_gpu = split.main_gpu
        if split.tensor_split:
            self._tensor_split = (ctypes.c_float * len(split.tensor_split))(*split.tensor_split)
            params.tensor_split = self._tensor_split  # alive while the model loads
        if progress is not None:

            @lib.llama_progress_callback  # type: ignore[untyped-decorator]
            def report(fraction: float, user_data: ctypes.c_void_p) -> bool:
                progress(float(fraction))
                return True

            self._progress = report  # alive while llama.cpp may call it
            params.progress_callback = report
        model = lib.llama_model_load_from_file(path.encode(), params)
        if not model:
            raise LlamaCppLoadError(load_failure(path, log.since(start)))
        return int(model)

    def _init_context(self, flash_attention: bool, kv_type: str) -> None:
        lib = self._lib
        params = lib.llama_context_default_params()
        params.n_ctx = self.num_ctx * self.parallel
        params.n_batch = params.n_ubatch = self.num_batch
        params.n_seq_max = self.parallel
        params.kv_unified = False  # a stream per sequence: see the module docstring
        params.n_threads = params.n_threads_batch = self.threads
        params.pooling_type = lib.LLAMA_POOLING_TYPE_NONE  # per-row hidden states; see run()
        params.flash_attn_type = (
            lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if flash_attention
            else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        params.type_k = params.type_v = int(KVCacheType(kv_type).dtype)
        params.no_perf = True
        ctx = lib.llama_init_from_model(self.model, params)
        if not ctx:
            raise LlamaCppLoadError(
                f"llama.cpp could not create a context of {self.num_ctx} tokens x "
                f"{self.parallel} sequences for this model (out of memory?)"
            )
        self.ctx = int(ctx)

    def _memory(self, lines: list[str], kv_type: str) -> MemoryUse:
        """llama.cpp's own figures: model size, and the buffers its log reports (also per
        device: `devices`)."""
        lib = self._lib
        devices = parse_buffers(lines)
        cache = sum(d["cache"] for d in devices.values())
        graph = sum(d["graph"] for d in devices.values())
        # What its buffers hold (mapped or allocated, repacked copies included), else the
        # tensors' size, all in RAM.
        weights = sum(d["weights"] for d in devices.values())
        if not weights:
            weights = int(lib.llama_model_size(self.model))
            device_parts(devices, "CPU")["weights"] = weights
        if not cache:  # the formula: cells x layers x (K + V per token) x bytes per element
            n_head = max(1, int(lib.llama_model_n_head(self.model)))
            head_dim = int(lib.llama_model_n_embd(self.model)) // n_head
            gqa = int(lib.llama_model_n_head_kv(self.model)) * head_dim
            cells = self.num_ctx * self.parallel
            layers = int(lib.llama_model_n_layer(self.model))
            cache = int(cells * layers * 2 * gqa * KVCacheType(kv_type).element_bytes)
            device_parts(devices, "CPU")["cache"] = cache
        self.devices = devices
        return MemoryUse(weights=weights, cache=cache, graph=graph)

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value of the model, as text (None when absent)."""
        buf = ctypes.create_string_buffer(256)
        n = self._lib.llama_model_meta_val_str(self.model, key.encode(), buf, 256)
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    # -- passes ---------------------------------------------------------------------------
    def replaces_state(self, token: int) -> bool:
        """No multimodal state here (see `ForwardEngine.replaces_state`)."""
        return False

    def plan(self, inputs: PassInput) -> LlamaCppPass:
        """Record one pass; llama.cpp assigns cache cells and builds the graph in `run()`."""
        if len(inputs.tokens) > self.num_batch:
            raise ValueError(f"a batch of {len(inputs.tokens)} inputs; at most {self.num_batch}")
        return LlamaCppPass(
            np.array(inputs.tokens, dtype=np.int32),
            np.asarray(inputs.positions, dtype=np.int32),
            np.asarray(inputs.sequences, dtype=np.int32),
            np.asarray(inputs.outputs, dtype=np.int32),
            inputs.hidden,
            inputs.greedy and not inputs.hidden,
        )

    def run(self, p: LlamaCppPass, on_started: Callable[[], None] | None = None) -> np.ndarray:
        """Decode a planned pass; `[n_outputs, vocab]` logits (or `[n_outputs, embd]` hidden
        states), or a greedy pass's `[n_outputs]` int32 token ids. Raises CacheFullError when
        llama.cpp finds no room in its cache.

        Logits in llama.cpp's own row order come back as a read-only view of its output
        buffer, valid until the next pass (the batching loop samples them before it runs
        another; copying 1 MiB per token of a 262k vocabulary is measurable). `forward()`
        returns a copy."""
        lib = self._lib
        if p.hidden:
            lib.llama_set_embeddings(self.ctx, True)
        if on_started is not None:
            on_started()
        try:
            if self.vision is None or not (p.tokens < 0).any():
                self._decode(p, 0, len(p.tokens))
                out = self._outputs(p)
            else:
                out = self._run_segments(p)
            # A greedy pass's token ids: numpy's argmax, on the host (llama.cpp's logits are
            # host memory already).
            return out.argmax(axis=1).astype(np.int32) if p.greedy else out
        finally:
            if p.hidden:
                lib.llama_set_embeddings(self.ctx, False)

    def _decode(self, p: LlamaCppPass, begin: int, end: int) -> None:
        """`llama_decode` of rows [begin, end) of the pass: tokens, or one image's embeddings
        (all placeholders of one image and sequence; see `batch.segments`)."""
        lib, n = self._lib, end - begin
        image = int(p.tokens[begin]) < 0
        b = self._embd_batch if image else self._batch
        assert b is not None
        mrope = self.cache.positions
        positions = p.positions[begin:end]
        done_image = None
        if image:
            assert self.vision is not None
            rows = [split_placeholder(int(t)) for t in p.tokens[begin:end]]
            picture, indices = rows[0][0], np.array([r for _, r in rows])
            b.embd[:n] = self.vision.embeddings(picture)[indices]
            if mrope is not None:  # the image's grid positions, from where it starts
                info = self.vision.positions(picture)
                seq, start = int(p.sequences[begin]), int(positions[0]) - int(indices[0])
                positions = info.at(mrope.real(seq, start), indices)
                if indices[-1] == len(info.relative) - 1:
                    done_image = (seq, start + len(info.relative), len(info.relative), info.n_pos)
        else:
            b.token[:n] = p.tokens[begin:end]
            if mrope is not None:
                positions = mrope.real_rows(p.sequences[begin:end], positions)
        outputs = p.outputs
        if begin or end < len(p.tokens):  # one segment of the pass: its own output rows
            outputs = outputs[(outputs >= begin) & (outputs < end)] - begin
        b.fill(positions, outputs, p.sequences[begin:end])
        non_causal = image and self.vision is not None and self.vision.non_causal
        if non_causal:
            lib.llama_set_causal_attn(self.ctx, False)
        try:
            with self._turns.turn() if self._turns is not None else contextlib.nullcontext():
                status = int(lib.llama_decode(self.ctx, b.raw))
        finally:
            if non_causal:
                lib.llama_set_causal_attn(self.ctx, True)
        if status == 1:
            raise CacheFullError()
        if status != 0:
            raise RuntimeError(f"llama_decode failed (status {status})")
        if done_image is not None and mrope is not None:
            mrope.image_done(*done_image)

    def _run_segments(self, p: LlamaCppPass) -> np.ndarray:
        """A pass with image rows: one `llama_decode` per run of token rows and per image of
        a sequence, in row order; output rows are read after the decode that made them."""
        width = self.n_embd if p.hidden else self.vocab_size
        out = np.empty((len(p.outputs), width), dtype=np.float32)
        get = self._lib.llama_get_embeddings_ith if p.hidden else self._lib.llama_get_logits_ith
        wanted = p.outputs.tolist()
        for begin, end in segments(p.tokens, p.sequences):
            self._decode(p, begin, end)
            for k, row in enumerate(wanted):
                if begin <= row < end:
                    out[k] = np.ctypeslib.as_array(get(self.ctx, row - begin), shape=(width,))
        return out

    def _outputs(self, p: LlamaCppPass) -> np.ndarray:
        lib, rows = self._lib, p.outputs.tolist()
        width = self.n_embd if p.hidden else self.vocab_size
        if not p.hidden and rows == sorted(set(rows)):  # llama.cpp's order: a view
            return self._logits.view(self.ctx, len(rows))
        get = lib.llama_get_embeddings_ith if p.hidden else lib.llama_get_logits_ith
        out = np.empty((len(rows), width), dtype=np.float32)
        for k, row in enumerate(rows):
            out[k] = np.ctypeslib.as_array(get(self.ctx, row), shape=(width,))
        return out

    def forward(self, inputs: PassInput) -> np.ndarray:
        """plan() and run() in one go; `outputs` are row indices into this batch."""
        out = self.run(self.plan(inputs))
        return out if out.flags.owndata else out.copy()

    def close(self) -> None:
        lib = self._lib
        for batch in (self._batch, self._embd_batch):
            if batch is not None:
                batch.free(lib)
        self._batch = self._embd_batch = None
        if self.vision is not None:
            self.vision.close()
            self.vision = None
        self._turns = None  # shared by the process (cpu_turns.turns_from_env)
        if self.ctx:
            lib.llama_free(self.ctx)
            self.ctx = 0
        if self.model:
            lib.llama_model_free(self.model)
            self.model = 0


def _split(lib: Any, path: str, placement: DevicePlacement) -> LlamaCppSplit:
    """llama.cpp's parameters for `placement` (see layout.py); LlamaCppLoadError with a
    sentence when this llama.cpp cannot follow it."""
    if placement.cpu_only:
        return LlamaCppSplit()
    from ..engine.gguf import GGUFFile

    with GGUFFile(path) as f:
        blocks = f.metadata.uint("block_count")
    try:
        return llamacpp_split(placement, blocks, llamacpp_devices(lib))
    except LlamaCppLayoutError as e:
        raise LlamaCppLoadError(f"{path.rsplit('/', 1)[-1]}: {e}") from None


def _default_threads() -> int:
    """llama.cpp's own default for CPU work: the physical performance cores
    (`cpu_get_num_math`; see hearth.engine.cpu)."""
    from ..engine.cpu import compute_threads

    return compute_threads()


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"
