"""Images on the llama.cpp engine: llama.cpp's multimodal library (libmtmd, through
llama-cpp-python's `mtmd_cpp`) with the model's projector file.

`MtmdVision.prompt` turns a prompt with `[img-N]` markers and the request's images into what
the batching loop evaluates: mtmd tokenizes the text around its own media marker (writing the
model's image text itself, e.g. Gemma 3's `<start_of_image>`/`<end_of_image>`), each image chunk
is encoded once per content (by hash, kept within a byte budget) and stands in the prompt as
placeholders (`hearth.engine.multimodal_store.placeholder`), so the prompt cache compares
images as it compares tokens. The engine's `run()` decodes placeholder rows from
`embeddings()` (a `llama_batch` of embeddings, with non-causal attention when mtmd says the
model wants it), as `mtmd_helper_decode_image_chunk` does.

Models whose images take fewer positions than embeddings (M-RoPE: Qwen2-VL and kin; `mrope`)
get each image's positions from mtmd as it tokenizes (`positions()`: every embedding's
(t, y, x, z) relative to the image's first position, which of them move with it, and how
many positions the image takes); `positions.MRopePositions` maps the loop's positions onto
llama.cpp's.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine.multimodal_store import DEFAULT_BUDGET, IMAGE_MARKER, image_hash, placeholder

__all__ = ["ImagePositions", "MtmdVision", "VisionLoadError"]


class VisionLoadError(RuntimeError):
    """The projector cannot be used with this model; the message is one sentence."""


@dataclass(frozen=True)
class ImagePositions:
    """An M-RoPE image's positions: `relative` `[rows, 4]` (t, y, x, z) from its first
    position, `moves` `[4]` (1 where a component adds the first position, else 0), and
    `n_pos`, how many positions the image takes in its sequence."""

    relative: np.ndarray
    moves: np.ndarray
    n_pos: int

    def at(self, first: int, rows: np.ndarray) -> np.ndarray:
        """llama.cpp's positions of `rows` of the image when it starts at `first`:
        section-major, `[4 * len(rows)]` (all t, then all y, x, z)."""
        return (self.relative[rows] + self.moves * first).T.ravel().astype(np.int32)


class MtmdVision:
    """One mtmd context over a loaded llama.cpp model. `prompt()` may be called from request
    threads (one encode at a time); `embeddings()` from the thread that decodes."""

    def __init__(
        self,
        lib: Any,
        model: int,
        projector: str,
        threads: int,
        use_gpu: bool = False,
        budget: int = DEFAULT_BUDGET,
    ) -> None:
        """`use_gpu`: the layout puts the projector on a GPU (mtmd picks llama.cpp's first)."""
        try:
            from llama_cpp import mtmd_cpp
        except (ImportError, OSError, RuntimeError) as e:
            raise VisionLoadError(
                f"images on the llama.cpp engine need llama.cpp's multimodal library (libmtmd), "
                f"which this llama-cpp-python lacks ({e})"
            ) from None
        self._lib, self._mtmd = lib, mtmd_cpp
        params = mtmd_cpp.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.print_timings = False
        params.n_threads = threads
        params.warmup = False
        name = projector.rsplit("/", 1)[-1]
        ctx = mtmd_cpp.mtmd_init_from_file(projector.encode(), ctypes.c_void_p(model), params)
        if not ctx:
            raise VisionLoadError(f"{name}: llama.cpp's mtmd could not load this projector")
        self._ctx = ctx
        try:
            if not mtmd_cpp.mtmd_support_vision(ctx):
                raise VisionLoadError(f"{name}: this projector does not encode images")
            self.mrope = bool(mtmd_cpp.mtmd_decode_use_mrope(ctx))
            self.non_causal = bool(mtmd_cpp.mtmd_decode_use_non_causal(ctx, None))
        except BaseException:
            self.close()
            raise
        self.n_embd = int(lib.llama_model_n_embd_inp(ctypes.c_void_p(model)))
        self.marker = mtmd_cpp.mtmd_default_marker().decode()
        self.budget = budget
        self._lock = threading.Lock()
        self._ids: dict[tuple[int, int], int] = {}  # (image hash, chunk ordinal) -> image id
        self._embd: OrderedDict[int, np.ndarray] = OrderedDict()  # image id -> [rows, n_embd]
        self._positions: dict[int, ImagePositions] = {}  # image id -> its M-RoPE positions
        self.encoded = 0  # image chunks encoded (for tests and stats)

    def prompt(
        self, text: str, images: list[bytes], bos: int | None
    ) -> tuple[list[int], list[int]]:
        """(inputs, same_batch marks) of `text` with `images` (`[img-N]` markers; none: the
        images first, as Ollama does). BOS per the file, never doubled (`bos`). Raises
        ValueError with a sentence for a bad marker or an image mtmd cannot read."""
        if not IMAGE_MARKER.search(text):
            text = "".join(f"[img-{i}]" for i in range(len(images))) + text
        order = [int(n) for n in IMAGE_MARKER.findall(text)]
        for n in order:
            if n >= len(images):
                raise ValueError(
                    f"the prompt refers to image {n} but the request has {len(images)}"
                )
        raw = IMAGE_MARKER.sub(lambda _: self.marker, text).encode()
        with self._lock:
            return self._tokenize(raw, [images[n] for n in order], order, bos)

    def _tokenize(
        self, raw: bytes, images: list[bytes], order: list[int], bos: int | None
    ) -> tuple[list[int], list[int]]:
        m = self._mtmd
        bitmaps = []
        chunks = m.mtmd_input_chunks_init()
        try:
            for data, n in zip(images, order, strict=True):
                buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
                bmp = m.mtmd_helper_bitmap_init_from_buf(self._ctx, buf, len(data), False)
                if not bmp:
                    raise ValueError(f"image {n}: llama.cpp cannot read this image")
                bitmaps.append(bmp)
                m.mtmd_bitmap_set_id(bmp, str(image_hash(data)).encode())
            text = m.mtmd_input_text(raw, len(raw), True, True)
            array = (m.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            status = m.mtmd_tokenize(self._ctx, chunks, ctypes.byref(text), array, len(bitmaps))
            if status != 0:
                raise ValueError(
                    f"llama.cpp's mtmd could not tokenize the prompt (status {status})"
                )
            return self._layout(chunks, bos)
        finally:
            m.mtmd_input_chunks_free(chunks)
            for bmp in bitmaps:
                m.mtmd_bitmap_free(bmp)

    def _layout(self, chunks: Any, bos: int | None) -> tuple[list[int], list[int]]:
        """Tokens and placeholders of mtmd's chunks, encoding images not seen before; each
        image's rows are marked to stay in one batch."""
        m = self._mtmd
        ids: list[int] = []
        marks: list[int] = []
        ordinal: dict[int, int] = {}
        for i in range(m.mtmd_input_chunks_size(chunks)):
            chunk = m.mtmd_input_chunks_get(chunks, i)
            kind = m.mtmd_input_chunk_get_type(chunk)
            if kind == m.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t(0)
                tokens = m.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                text = [int(tokens[k]) for k in range(n.value)]
                if not ids and bos is not None and text[:2] == [bos, bos]:
                    text = text[1:]  # the prompt wrote BOS and mtmd added one
                ids.extend(text)
                marks.extend([0] * len(text))
                continue
            if kind != m.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                raise ValueError("the llama.cpp engine takes images only, not audio")
            rows = int(m.mtmd_input_chunk_get_n_tokens(chunk))
            if not self.mrope and int(m.mtmd_input_chunk_get_n_pos(chunk)) != rows:
                raise ValueError("this model's images take fewer positions than embeddings")
            digest = int((m.mtmd_input_chunk_get_id(chunk) or b"0").decode())
            k = ordinal.get(digest, 0)
            ordinal[digest] = k + 1
            image = self._ids.setdefault((digest, k), len(self._ids))
            if image not in self._embd:
                self._embd[image] = self._encode(chunk, rows)
                if self.mrope:
                    self._positions[image] = self._decoder_positions(chunk, rows)
                self._evict(keep=image)
            self._embd.move_to_end(image)
            ids.extend(placeholder(image, r) for r in range(rows))
            marks.extend([rows - 1] + [0] * (rows - 1))
        return ids, marks

    def _encode(self, chunk: Any, rows: int) -> np.ndarray:
        m = self._mtmd
        status = m.mtmd_encode_chunk(self._ctx, chunk)
        if status != 0:
            raise ValueError(f"llama.cpp's mtmd could not encode the image (status {status})")
        ptr = m.mtmd_get_output_embd(self._ctx)
        self.encoded += 1
        return np.ctypeslib.as_array(ptr, shape=(rows, self.n_embd)).copy()

    def _decoder_positions(self, chunk: Any, rows: int) -> ImagePositions:
        """mtmd's positions of an image's embeddings, as llama.cpp's batch wants them
        (t, y, x, z), relative to the first position; asked at two first positions to learn
        which of them move with it."""
        m = self._mtmd
        tokens = m.mtmd_input_chunk_get_tokens_image(chunk)
        at = []
        for pos_0 in (0, 1):
            out = (m.mtmd_decoder_pos * rows)()
            m.mtmd_helper_image_get_decoder_pos(tokens, pos_0, out)
            at.append(np.array([(p.t, p.y, p.x, p.z) for p in out], dtype=np.int64))
        return ImagePositions(
            relative=at[0].astype(np.int32),
            moves=(at[1][0] - at[0][0]).astype(np.int32),
            n_pos=int(m.mtmd_input_chunk_get_n_pos(chunk)),
        )

    def positions(self, image: int) -> ImagePositions:
        """The M-RoPE positions of an image chunk `prompt()` encoded (`mrope` models)."""
        with self._lock:
            return self._positions[image]

    def _evict(self, keep: int) -> None:
        total = sum(e.nbytes for e in self._embd.values())
        for image in list(self._embd):
            if total <= self.budget:
                break
            if image != keep:
                total -= self._embd.pop(image).nbytes
                self._positions.pop(image, None)

    def embeddings(self, image: int) -> np.ndarray:
        """`[rows, n_embd]` of an image chunk `prompt()` encoded. KeyError when it was
        dropped from the budget since (the request that needs it then fails)."""
        with self._lock:
            return self._embd[image]

    def close(self) -> None:
        if self._ctx:
            self._mtmd.mtmd_free(self._ctx)
            self._ctx = None
