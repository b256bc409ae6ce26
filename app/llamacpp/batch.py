"""The engine's side of one `llama_decode`: the batch it fills and the logits it reads back.

* `LlamaBatch`: a `llama_batch` of fixed size (token ids, or embeddings for images) whose
  arrays are numpy views, filled per pass by slice assignment (`fill`); M-RoPE batches carry
  four positions per row in an array of ours. `free()` hands back what llama.cpp allocated.
* `LogitsView`: llama.cpp's logits buffer as a read-only numpy array, valid until the next
  decode; remade only when the buffer moves or the row count changes.
* `segments()`: the row ranges of a pass that are decoded apart (runs of token rows, and each
  image's rows of one sequence).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..engine.multimodal_store import split_placeholder

__all__ = ["LlamaBatch", "LogitsView", "segments"]


class LlamaBatch:
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


class LogitsView:
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


def segments(tokens: np.ndarray, sequences: np.ndarray) -> list[tuple[int, int]]:
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
