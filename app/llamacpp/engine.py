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
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine.cpu_turns import CpuTurns, turns_from_env
from ..engine.input import PassInput
from ..engine.kvcache import CacheFullError, KVCacheType, ShiftNotSupportedError
from ..engine.memory_use import MemoryUse
from ..engine.ml.api import OutOfMemoryError
from ..engine.ml.placement import DevicePlacement
from ..engine.multimodal_store import split_placeholder
from .buffers import device_parts, parse_buffers
from .layout import LlamaCppLayoutError, LlamaCppSplit, llamacpp_devices, llamacpp_split
from .positions import MRopePositions
from .tokenizer import LlamaCppTokenizer
from .vision import MtmdVision, VisionLoadError

__all__ = ["LlamaCppEngine", "LlamaCppLoadError", "LlamaCppPass"]

_log = logging.getLogger("hearth.llamacpp")

_MAX_POS = 2**31 - 1  # hearth.engine.kvcache's MAX_POS: "to the end"
_POOLING = {1: "mean", 2: "first"}  # the file's pooling_type, as Hearth's engine reads it


class LlamaCppLoadError(RuntimeError):
    """llama.cpp cannot load the file; the message is one sentence for the user."""


class _Log:
    """llama.cpp's log, captured (its callback is process-wide): the last 400 lines for error
    messages, and every line reporting a buffer size (a model load logs more than 400 lines
    before its context's buffers). Lines are numbered: `mark()` then `since(mark)` gives what
    came after. Forwarded to Python logging at debug level."""

    _KEEP = 400

    def __init__(self, lib: Any) -> None:
        self._recent: deque[tuple[int, str]] = deque(maxlen=self._KEEP)
        self._buffers: list[tuple[int, str]] = []
        self._count = 0
        self._partial = ""
        self._lock = threading.Lock()

        @lib.llama_log_callback  # type: ignore[untyped-decorator]
        def callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            self._add(text.decode("utf-8", "replace"))

        self._callback = callback  # llama.cpp keeps calling it: keep it alive
        lib.llama_log_set(callback, ctypes.c_void_p(0))

    def _add(self, text: str) -> None:
        with self._lock:
            text = self._partial + text
            *done, self._partial = text.split("\n")
            for line in done:
                _log.debug("%s", line)
                self._recent.append((self._count, line))
                if "buffer size" in line:
                    self._buffers.append((self._count, line))
                self._count += 1

    def mark(self) -> int:
        with self._lock:
            return self._count

    def since(self, mark: int) -> list[str]:
        """The recent lines (at most the last 400) logged since `mark`."""
        with self._lock:
            return [line for i, line in self._recent if i >= mark]

    def buffers_since(self, mark: int) -> list[str]:
        """Every buffer-size line logged since `mark`."""
        with self._lock:
            return [line for i, line in self._buffers if i >= mark]


_LIB: tuple[Any, _Log] | None = None
_LIB_LOCK = threading.Lock()


def _library() -> tuple[Any, _Log]:
    """llama_cpp, its backend initialised and its log captured (once per process)."""
    global _LIB
    with _LIB_LOCK:
        if _LIB is None:
            try:
                import llama_cpp
            except ImportError as e:
                raise LlamaCppLoadError(
                    f"the llama.cpp engine needs llama-cpp-python, which is not installed ({e})"
                ) from None
            log = _Log(llama_cpp)
            llama_cpp.llama_backend_init()
            _LIB = (llama_cpp, log)
        return _LIB


@dataclass
class LlamaCppPass:
    """A planned pass (see `ForwardEngine.plan`): `tokens` may change until `run()`."""

    tokens: np.ndarray
    positions: np.ndarray
    sequences: np.ndarray
    outputs: np.ndarray
    hidden: bool
    greedy: bool = False  # run() returns token ids (PassInput.greedy)


class _SequenceCache:
    """The slot-cache operations `hearth.engine.prompt_cache.InputCache` needs, on llama.cpp's
    per-sequence memory (`llama_memory_seq_*`)."""

    def __init__(self, lib: Any, ctx: int, model: int) -> None:
        self._lib = lib
        self._mem = lib.llama_get_memory(ctx)  # None for models without a cache
        self._swa = int(lib.llama_model_n_swa(model))
        # M-RoPE images: the loop's positions -> llama.cpp's (set by the engine)
        self.positions: MRopePositions | None = None

    def _real(self, seq: int, pos: int) -> int:
        return pos if self.positions is None else self.positions.real(seq, pos)

    def remove(self, seq: int, begin: int, end: int = _MAX_POS) -> None:
        """Drop positions [begin, end); later positions move down (a context shift)."""
        lib, mem = self._lib, self._mem
        if not mem:
            return
        if end == _MAX_POS:
            lib.llama_memory_seq_rm(mem, seq, self._real(seq, begin), -1)
            if self.positions is not None:
                self.positions.truncate(seq, begin)
            return
        if self.positions is not None or not lib.llama_memory_can_shift(mem):
            raise ShiftNotSupportedError()
        lib.llama_memory_seq_rm(mem, seq, begin, end)
        lib.llama_memory_seq_add(mem, seq, end, -1, begin - end)

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        """`dst` holds `src`'s first `length` positions (and nothing else). Across streams
        llama.cpp copies a sequence only whole (a partial range aborts the process)."""
        lib, mem = self._lib, self._mem
        if not mem:
            return
        lib.llama_memory_seq_rm(mem, dst, -1, -1)
        lib.llama_memory_seq_cp(mem, src, dst, -1, -1)
        lib.llama_memory_seq_rm(mem, dst, self._real(src, length), -1)
        if self.positions is not None:
            self.positions.copy(src, dst, length)

    def can_resume(self, seq: int, pos: int) -> bool:
        """False when a sliding window already dropped positions the rest still needs."""
        if not self._mem or not self._swa:
            return True
        first = int(self._lib.llama_memory_seq_pos_min(self._mem, seq))
        if first < 0:
            return pos == 0
        return first <= max(0, self._real(seq, pos) - self._swa)


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
        lib, log = _library()
        self._lib = lib
        self.num_ctx = num_ctx
        self.num_batch = min(num_batch, num_ctx)
        self.parallel = parallel
        self.threads = threads or _default_threads()
        self.model, self.ctx = 0, 0
        self._batch: _Batch | None = None
        self._embd_batch: _Batch | None = None
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
            self.cache = _SequenceCache(lib, self.ctx, self.model)
            self.architecture = self.meta("general.architecture") or "unknown"
            self.context_length = int(self.meta(f"{self.architecture}.context_length") or 0)
            pooling = int(self.meta(f"{self.architecture}.pooling_type") or 0)
            self.pooling: str = _POOLING.get(pooling, "last")
            self._batch = _Batch(lib, self.num_batch, 0)
            self._logits = _LogitsView(lib, self.vocab_size)
            if projector:
                try:
                    on_gpu = placement is not None and placement.projector is not None
                    self.vision = MtmdVision(lib, self.model, projector, self.threads, on_gpu)
                except VisionLoadError as e:
                    raise LlamaCppLoadError(str(e)) from None
                # M-RoPE: four positions per embedding (t, y, x, z; see vision.py)
                per_row = 4 if self.vision.mrope else 1
                self._embd_batch = _Batch(lib, self.num_batch, self.vision.n_embd, per_row)
                if self.vision.mrope:
                    self.cache.positions = MRopePositions()
        except BaseException:
            self.close()
            raise

    # -- loading --------------------------------------------------------------------------
    def _load_model(
        self, path: str, progress: Callable[[float], None] | None, log: _Log, start: int
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
            raise LlamaCppLoadError(_load_failure(path, log.since(start)))
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
        (all placeholders of one image and sequence; see `_segments`)."""
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
        for begin, end in _segments(p.tokens, p.sequences):
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


class _Batch:
    """A `llama_batch` of `size` rows (token ids, or `embd`-wide embeddings when `embd`),
    each row in one sequence. The addresses of its arrays are looked up once: ctypes field
    access costs microseconds per use, and a pass of one token is all such overhead."""

    def __init__(self, lib: Any, size: int, embd: int, positions_per_row: int = 1) -> None:
        self.raw = lib.llama_batch_init(size, embd, 1)
        raw = self.raw
        as_array = np.ctypeslib.as_array
        # numpy views of the batch's own arrays: filling one is a slice assignment.
        empty = np.empty(0, dtype=np.float32)  # (the batch has either tokens or embd)
        self.token = as_array(raw.token, shape=(size,)) if not embd else empty
        self.embd = as_array(raw.embd, shape=(size, embd)) if embd else empty
        self._own_pos: Any = None  # the batch's own position array, while ours stands in
        if positions_per_row > 1:  # llama_batch_init allocates one position per row
            self._pos = np.zeros(size * positions_per_row, dtype=np.int32)
            self._own_pos = raw.pos
            raw.pos = self._pos.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        else:
            self._pos = as_array(raw.pos, shape=(size,))
        self._logits = as_array(raw.logits, shape=(size,))
        as_array(raw.n_seq_id, shape=(size,))[:] = 1
        self._seq_rows = [raw.seq_id[i] for i in range(size)]

    def free(self, lib: Any) -> None:
        if self._own_pos is not None:
            self.raw.pos = self._own_pos  # llama_batch_free frees what it allocated
        lib.llama_batch_free(self.raw)

    def fill(self, positions: np.ndarray, outputs: np.ndarray, sequences: np.ndarray) -> None:
        """Everything but the inputs: positions (one per row, or M-RoPE's sections one
        after another), the rows whose outputs are wanted (indices into these rows), the
        rows' sequence ids."""
        n = len(sequences)
        self._pos[: len(positions)] = positions
        flags = self._logits
        flags[:n] = 0
        flags[outputs] = 1
        rows = self._seq_rows
        for i, seq in enumerate(sequences.tolist()):
            rows[i][0] = seq
        self.raw.n_tokens = n


class _LogitsView:
    """llama.cpp's logits buffer as a read-only numpy array, made anew only when the buffer
    moves or the number of rows changes (usually never between tokens)."""

    def __init__(self, lib: Any, width: int) -> None:
        # llama_get_logits again, returning the address as an int (no POINTER object).
        prototype = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
        self._get = prototype(_address(lib.llama_get_logits))
        self._width = width
        self._key: tuple[int, int] = (0, 0)
        self._array = np.empty((0, width), dtype=np.float32)

    def view(self, ctx: int, rows: int) -> np.ndarray:
        address = int(self._get(ctx) or 0)
        if not address:
            raise RuntimeError("llama.cpp returned no logits")
        if (address, rows) != self._key:
            buffer = (ctypes.c_float * (rows * self._width)).from_address(address)
            flat = np.ctypeslib.as_array(buffer)  # a ctypes array: numpy shares its memory
            self._array = flat.reshape(rows, self._width)
            self._array.flags.writeable = False
            self._key = (address, rows)
        return self._array


def _address(pointer: Any) -> int:
    return int(ctypes.cast(pointer, ctypes.c_void_p).value or 0)


def _segments(tokens: np.ndarray, sequences: np.ndarray) -> list[tuple[int, int]]:
    """Row ranges [begin, end) of a pass that llama.cpp decodes apart: runs of token rows,
    and the rows of one image (same image id) of one sequence."""
    keys = [
        (-1, -1) if t >= 0 else (split_placeholder(t)[0], s)
        for t, s in zip(tokens.tolist(), sequences.tolist(), strict=True)
    ]
    out: list[tuple[int, int]] = []
    begin = 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[begin]:
            out.append((begin, i))
            begin = i
    return out


def _load_failure(path: str, lines: list[str]) -> str:
    """A sentence for a file llama.cpp refused, from what its log said."""
    name = path.rsplit("/", 1)[-1]
    for line in reversed(lines):
        if "unknown model architecture" in line:
            arch = line.split("unknown model architecture", 1)[1].strip(" :'\"")
            return f"{name}: neither Hearth nor llama.cpp knows the architecture '{arch}'"
    errors = [ln.strip() for ln in lines if "error" in ln.lower() or "failed" in ln.lower()]
    detail = f": {errors[-1]}" if errors else ""
    return f"{name}: llama.cpp could not load the model{detail}"


def _default_threads() -> int:
    """llama.cpp's own default for CPU work: the physical performance cores
    (`cpu_get_num_math`; see hearth.engine.cpu)."""
    from ..engine.cpu import compute_threads

    return compute_threads()


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"
