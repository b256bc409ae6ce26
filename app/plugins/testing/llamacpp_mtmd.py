"""llama.cpp's multimodal library (libmtmd) as an oracle for images, run in its own process:
never import llama_cpp next to Hearth's ggml. Run it as a script (`run_oracle(LLAMACPP_MTMD,
...)` from hearth.plugins.testing); importing this file imports neither llama_cpp nor Hearth,
so `LLAMACPP_MTMD` and `libmtmd_missing` may be imported.

Usage: python llamacpp_mtmd.py REQUEST.json RESULT.npz
       python llamacpp_mtmd.py --check        (exit 0 when libmtmd loads, else MTMD_MISSING)

REQUEST: {"model": text GGUF, "mmproj": projector GGUF, "images": [image file, ...],
          "prompt": str, "marker": str (default: mtmd's own, "<__media__>"),
          "threads": int (2), "n_ctx": int (1024), "n_batch": int (512), "greedy": int (0),
          "flash_attn": "auto" | "on" | "off" (the encoder's; default "auto", mtmd's),
          "warmup": bool (false), "helper_check": bool (false), "decode_repeats": int (1),
          "preprocess_only": bool (false: stop after mtmd_tokenize, writing only the timings
          bitmap_s and tokenize_s)}
  The prompt holds one `marker` per image, in order (each is replaced by mtmd's marker, so a
  caller may write Hearth's "[img-0]"). mtmd tokenizes it (BOS added, special tokens parsed)
  and writes the model's text around each image itself (Gemma 3: `<start_of_image>` before
  and `<end_of_image>` after the image, no newlines).

The prompt is evaluated chunk by chunk as `mtmd_helper_eval_chunks` does it (text chunks with
`mtmd_helper_eval_chunk_single`, each image encoded with `mtmd_encode_chunk` and its embeddings
read with `mtmd_get_output_embd`, then decoded with `mtmd_helper_decode_image_chunk`), so that
each image is encoded once and both steps are timed. With `helper_check`, the memory is
cleared and the prompt evaluated again by `mtmd_helper_eval_chunks` itself (encoding again).

RESULT (npz):
  ids            the prompt's positions: token ids, -1 at image positions
  image_embd_i   image i's embeddings `[tokens, text_embd]` float32
  logits         the last position's logits `[vocab]`
  logits_helper  the same from `mtmd_helper_eval_chunks` (with helper_check)
  greedy         `greedy` tokens of greedy continuation (stopping at end of generation)
  greedy_text    their text as llama.cpp detokenizes it (UTF-8 bytes)
  encode_s       seconds of `mtmd_encode_chunk`, per image
  decode_s       seconds of `mtmd_helper_decode_image_chunk` `[images, decode_repeats]` (the
                 image's positions in the text model; repeats after the first remove them
                 from the memory and decode them again)
  bitmap_s       seconds of `mtmd_helper_bitmap_init_from_buf` per image (decoding the file)
  tokenize_s     seconds of `mtmd_tokenize` (llama.cpp's resize and normalisation happen here)
Exit status MTMD_MISSING (4): llama-cpp-python is not installed, or was built without libmtmd
(`-DLLAVA_BUILD=OFF`); stderr says which.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["LLAMACPP_MTMD", "MTMD_MISSING", "libmtmd_missing"]

LLAMACPP_MTMD = Path(__file__).resolve()
MTMD_MISSING = 4
_callbacks: list[Any] = []  # llama.cpp keeps calling the log callback: keep it alive


def libmtmd_missing(python: str | None = None) -> str | None:
    """None when llama-cpp-python's multimodal library loads (checked in a child process of
    `python`, default this one's interpreter), else a sentence saying why not."""
    proc = subprocess.run(
        [python or sys.executable, str(LLAMACPP_MTMD), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode == 0:
        return None
    why = (proc.stderr or proc.stdout).strip().splitlines()
    return why[-1] if why else f"the mtmd check exited with status {proc.returncode}"


def _check() -> None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError as e:
        print(f"llama-cpp-python is not installed ({e})", file=sys.stderr)
        sys.exit(MTMD_MISSING)
    try:
        from llama_cpp import mtmd_cpp
    except (OSError, FileNotFoundError, RuntimeError) as e:
        print(
            "llama-cpp-python was built without llama.cpp's multimodal library libmtmd "
            f"(-DLLAVA_BUILD=OFF?): {e}",
            file=sys.stderr,
        )
        sys.exit(MTMD_MISSING)
    mtmd_cpp.mtmd_default_marker()


def _quiet() -> None:
    import ctypes

    import llama_cpp
    from llama_cpp import mtmd_cpp

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def drop(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        pass

    _callbacks.append(drop)
    llama_cpp.llama_log_set(drop, ctypes.c_void_p(0))
    mtmd_cpp.mtmd_log_set(drop, ctypes.c_void_p(0))
    mtmd_cpp.mtmd_helper_log_set(drop, ctypes.c_void_p(0))


def _logits_last(llama_cpp: Any, ctx: Any, n_vocab: int) -> np.ndarray:
    ptr = llama_cpp.llama_get_logits_ith(ctx, -1)
    if not ptr:
        raise RuntimeError("llama.cpp has no logits for the last position")
    return np.ctypeslib.as_array(ptr, shape=(n_vocab,)).astype(np.float32)


def main() -> None:
    if sys.argv[1:] == ["--check"]:
        _check()
        return
    _check()
    import ctypes

    import llama_cpp
    from llama_cpp import Llama, mtmd_cpp

    with open(sys.argv[1]) as f:
        req = json.load(f)
    sys.path.insert(0, str(LLAMACPP_MTMD.parent))
    from llamacpp_logits import use_plain_layouts

    use_plain_layouts()
    if not req.get("verbose"):
        _quiet()
    threads = int(req.get("threads", 2))
    n_ctx = int(req.get("n_ctx", 1024))
    n_batch = min(int(req.get("n_batch", 512)), n_ctx)
    llm = Llama(
        req["model"],
        n_ctx=n_ctx,
        n_batch=n_batch,
        n_ubatch=n_batch,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=bool(req.get("verbose")),
    )
    ctx, model, vocab = llm.ctx, llm._model.model, llm._model.vocab
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)

    params = mtmd_cpp.mtmd_context_params_default()
    params.use_gpu = False
    params.print_timings = False
    params.n_threads = threads
    params.warmup = bool(req.get("warmup", False))
    params.flash_attn_type = {
        "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
        "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    }[req.get("flash_attn", "auto")]
    mctx = mtmd_cpp.mtmd_init_from_file(req["mmproj"].encode(), model, params)
    if not mctx:
        raise RuntimeError(f"mtmd could not load {req['mmproj']}")

    bitmaps = []
    bitmap_s = []
    for path in req["images"]:
        data = Path(path).read_bytes()
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        t0 = time.perf_counter()
        bmp = mtmd_cpp.mtmd_helper_bitmap_init_from_buf(mctx, buf, len(data), False)
        bitmap_s.append(time.perf_counter() - t0)
        if not bmp:
            raise RuntimeError(f"mtmd could not read the image {path}")
        bitmaps.append(bmp)
    marker = mtmd_cpp.mtmd_default_marker().decode()
    prompt = req["prompt"].replace(req.get("marker") or marker, marker)
    if prompt.count(marker) != len(bitmaps):
        raise ValueError(f"the prompt has {prompt.count(marker)} markers for {len(bitmaps)} images")
    raw = prompt.encode()
    text = mtmd_cpp.mtmd_input_text(raw, len(raw), True, True)
    chunks = mtmd_cpp.mtmd_input_chunks_init()
    array = (mtmd_cpp.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
    t0 = time.perf_counter()
    status = mtmd_cpp.mtmd_tokenize(mctx, chunks, ctypes.byref(text), array, len(bitmaps))
    tokenize_s = time.perf_counter() - t0
    if status != 0:
        raise RuntimeError(f"mtmd_tokenize failed ({status})")
    out: dict[str, np.ndarray] = {
        "bitmap_s": np.array(bitmap_s, dtype=np.float64),
        "tokenize_s": np.array([tokenize_s]),
    }
    if req.get("preprocess_only"):
        np.savez(sys.argv[2], allow_pickle=False, **out)
        return

    memory = llama_cpp.llama_get_memory(ctx)
    n_chunks = mtmd_cpp.mtmd_input_chunks_size(chunks)
    ids: list[int] = []
    encode_s: list[float] = []
    decode_s: list[list[float]] = []
    repeats = max(1, int(req.get("decode_repeats", 1)))
    n_past = llama_cpp.llama_pos(0)
    llama_cpp.llama_memory_clear(memory, True)
    for i in range(n_chunks):
        chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, i)
        kind = mtmd_cpp.mtmd_input_chunk_get_type(chunk)
        last = i == n_chunks - 1
        if kind == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t(0)
            tokens = mtmd_cpp.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            ids.extend(int(tokens[k]) for k in range(n.value))
            status = mtmd_cpp.mtmd_helper_eval_chunk_single(
                mctx, ctx, chunk, n_past.value, 0, n_batch, last, ctypes.byref(n_past)
            )
            if status != 0:
                raise RuntimeError(f"text chunk {i}: decode failed ({status})")
            continue
        if kind != mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE:
            raise RuntimeError(f"chunk {i} is neither text nor an image")
        n_tokens = mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk)
        t0 = time.perf_counter()
        status = mtmd_cpp.mtmd_encode_chunk(mctx, chunk)
        encode_s.append(time.perf_counter() - t0)
        if status != 0:
            raise RuntimeError(f"image chunk {i}: encode failed ({status})")
        embd_ptr = mtmd_cpp.mtmd_get_output_embd(mctx)
        n_embd = llama_cpp.llama_model_n_embd_inp(model)
        embd = np.ctypeslib.as_array(embd_ptr, shape=(n_tokens * n_embd,)).copy()
        out[f"image_embd_{len(encode_s) - 1}"] = embd.reshape(n_tokens, n_embd)
        held = embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float))  # our copy (kept alive)
        no_callback = mtmd_cpp.mtmd_helper_post_decode_callback()  # NULL
        start = n_past.value
        times = []
        for r in range(repeats):
            if r:
                llama_cpp.llama_memory_seq_rm(memory, 0, start, -1)
            n_past = llama_cpp.llama_pos(start)
            t0 = time.perf_counter()
            status = mtmd_cpp.mtmd_helper_decode_image_chunk(
                mctx, ctx, chunk, held, start, 0, n_batch, ctypes.byref(n_past), no_callback, None
            )
            times.append(time.perf_counter() - t0)
            if status != 0:
                raise RuntimeError(f"image chunk {i}: decode failed ({status})")
        decode_s.append(times)
        ids.extend([-1] * (n_past.value - start))
    out["ids"] = np.array(ids, dtype=np.int32)
    out["logits"] = _logits_last(llama_cpp, ctx, n_vocab)
    out["encode_s"] = np.array(encode_s, dtype=np.float64)
    out["decode_s"] = np.array(decode_s, dtype=np.float64).reshape(len(encode_s), repeats)

    greedy: list[int] = []
    logits = out["logits"]
    token = (llama_cpp.llama_token * 1)()
    for _ in range(int(req.get("greedy", 0))):
        tok = int(np.argmax(logits))
        if llama_cpp.llama_vocab_is_eog(vocab, tok):
            break
        greedy.append(tok)
        token[0] = tok
        if llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(token, 1)) != 0:
            raise RuntimeError("decoding a greedy token failed")
        logits = _logits_last(llama_cpp, ctx, n_vocab)
    out["greedy"] = np.array(greedy, dtype=np.int32)
    out["greedy_text"] = np.frombuffer(llm.detokenize(greedy) or b" ", dtype=np.uint8)

    if req.get("helper_check"):
        llama_cpp.llama_memory_clear(memory, True)
        new_past = llama_cpp.llama_pos(0)
        status = mtmd_cpp.mtmd_helper_eval_chunks(
            mctx, ctx, chunks, 0, 0, n_batch, True, ctypes.byref(new_past)
        )
        if status != 0:
            raise RuntimeError(f"mtmd_helper_eval_chunks failed ({status})")
        if new_past.value != len(ids):
            raise RuntimeError(f"mtmd_helper_eval_chunks took {new_past.value} positions")
        out["logits_helper"] = _logits_last(llama_cpp, ctx, n_vocab)

    mtmd_cpp.mtmd_input_chunks_free(chunks)
    for bmp in bitmaps:
        mtmd_cpp.mtmd_bitmap_free(bmp)
    mtmd_cpp.mtmd_free(mctx)
    np.savez(sys.argv[2], allow_pickle=False, **out)


if __name__ == "__main__":
    main()
