"""Gemma 3 image speed in Hearth beside llama.cpp's multimodal library (libmtmd), same files,
same run: preprocessing a photo, encoding one image, and the image's positions in the text
model.

    .venv/bin/python bench/vision_encode.py [--threads 2] [--rounds 1] [--repeats 3]
                                            [--dir DIR] [--layers 27]

The files are written once (into --dir, default ~/.cache/hearth-bench/vision-encode) with
random weights from a fixed seed: a projector file the size of Gemma 3 4B's (the SigLIP tower:
896 px in 14 px patches, 27 layers of 1152 dimensions, 16 heads, feed-forward 4304, pooled to
256 tokens and projected to 2560; F16 matrices, F32 embeddings and norms, as llama.cpp's
converter writes `mmproj-*-f16.gguf`, names from plugins/gemma3/vision.py's LLAMACPP_NAMES),
and a two-layer Gemma 3 text model of embedding size 2560 so that both engines load the pair.

Timed:

(a) preprocessing a 12-megapixel JPEG (4000x3000) into the tower's pixel values: Hearth's
    `image.preprocess` (Pillow: decode, resize, normalise), median of --repeats; llama.cpp's
    file decoding (stb_image, `mtmd_helper_bitmap_init_from_buf`) plus `mtmd_tokenize` (its
    resize and normalisation), once. Target for Hearth: under 150 ms.
(b) encoding one 896x896 image: the encoder graph's compute in Hearth (the multimodal store
    computing what `encode_multimodal` built), `mtmd_encode_chunk` in llama.cpp. Half a minute
    on a two-core machine, so each engine encodes once per round (no warm-up). Target: Hearth
    within 1.1x of llama.cpp's time.
(c) the image's 256 positions in the text model, as one batch (bidirectional, from the
    embeddings of (b)): median of --repeats, the positions removed from the cache between.
    Two layers, because both engines skip the last layer's feed-forward for positions whose
    logits are not wanted (llama.cpp wants none of an image's, Hearth the last one's): the
    first layer is what every layer but the last costs.

llama.cpp runs in its own process (hearth.plugins.testing.llamacpp_mtmd), after Hearth has
closed its model; --rounds N runs both N times, alternating which goes first, and prints
medians (a shared machine's other load shows as rounds far apart; llama.cpp's default build
uses OpenMP, whose waiting threads suffer most from it). Where llama-cpp-python lacks libmtmd,
Hearth's figures alone are printed.
--layers makes a shallower tower (a quick check of the set-up; the figures are then not
Gemma 3's).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from machine import cpu_description  # noqa: E402


@dataclass(frozen=True)
class Sizes:
    """Gemma 3 4B's image encoder, and a two-layer text model of its embedding size."""

    image_size: int = 896
    patch_size: int = 14
    vision_embd: int = 1152
    vision_ffn: int = 4304
    vision_layers: int = 27
    vision_heads: int = 16
    text_embd: int = 2560
    text_ffn: int = 10240
    text_layers: int = 2
    text_heads: int = 8
    text_kv_heads: int = 4
    head_dim: int = 256
    seed: int = 0


def write_mmproj(path: Path, s: Sizes) -> None:
    """A llama.cpp projector file (architecture clip, projector type gemma3), random weights."""
    import gguf
    from gguf import GGMLQuantizationType as QT

    from hearth.plugins.testing import add_tensor
    from hearth_gemma3.vision import LLAMACPP_NAMES

    rng = np.random.default_rng(s.seed)
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("general.type", "mmproj")
    w.add_name("bench-gemma3-4b-vision")
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    w.add_bool("clip.has_vision_encoder", True)
    w.add_uint32("clip.vision.projection_dim", s.text_embd)
    w.add_uint32("clip.vision.image_size", s.image_size)
    w.add_uint32("clip.vision.patch_size", s.patch_size)
    w.add_uint32("clip.vision.embedding_length", s.vision_embd)
    w.add_uint32("clip.vision.feed_forward_length", s.vision_ffn)
    w.add_uint32("clip.vision.block_count", s.vision_layers)
    w.add_uint32("clip.vision.attention.head_count", s.vision_heads)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_string("clip.projector_type", "gemma3")
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_bool("clip.use_gelu", True)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    e, f, p = s.vision_embd, s.vision_ffn, s.patch_size
    n_patches = (s.image_size // p) ** 2

    def name(role: str, i: int = 0, suffix: str = "weight") -> str:
        return f"{LLAMACPP_NAMES[role].format(i=i)}.{suffix}"

    def matrix(role: str, out: int, inp: int, i: int = 0, qtype: QT = QT.F16) -> None:
        data = rng.standard_normal((out, inp), dtype=np.float32) / np.float32(inp**0.5)
        add_tensor(w, name(role, i), data, qtype)

    def vector(role: str, n: int, i: int = 0, suffix: str = "bias", base: float = 0.0) -> None:
        add_tensor(w, name(role, i, suffix), base + 0.1 * rng.standard_normal(n))

    # numpy order: [embd, 3, P, P] is ggml's [P, P, 3, embd]; embeddings stay F32 (converter)
    patch = rng.standard_normal((e, 3, p, p), dtype=np.float32) / np.float32((3 * p * p) ** 0.5)
    add_tensor(w, name("patch"), patch)
    vector("patch", e)
    add_tensor(w, name("position"), 0.1 * rng.standard_normal((n_patches, e)))
    for i in range(s.vision_layers):
        vector("norm1", e, i, "weight", 1.0)
        vector("norm1", e, i)
        for role in ("q", "k", "v", "out"):
            matrix(role, e, e, i)
            vector(role, e, i)
        vector("norm2", e, i, "weight", 1.0)
        vector("norm2", e, i)
        matrix("up", f, e, i)
        vector("up", f, i)
        matrix("down", e, f, i)
        vector("down", e, i)
    vector("post_norm", e, suffix="weight", base=1.0)
    vector("post_norm", e)
    vector("soft_norm", e, suffix="weight", base=1.0)  # stored as 1 + w
    # ggml [text_embd, vision_embd]: numpy [vision_embd, text_embd]; F16 as converted
    projection = rng.standard_normal((e, s.text_embd), dtype=np.float32) / np.float32(e**0.5)
    add_tensor(w, name("projection"), projection, QT.F16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_text_model(path: Path, s: Sizes) -> None:
    """A Gemma 3 text model (F16, `text_layers` layers) whose vocabulary has Gemma's image
    tokens, so both engines lay an image out as Gemma does."""
    import gguf
    from gguf import GGMLQuantizationType as QT

    from hearth.plugins.testing import add_spm_vocab, add_tensor, spm_vocab

    tokens, scores, types = spm_vocab()
    for text, kind in (
        ("<start_of_image>", 3),
        ("<end_of_image>", 3),
        ("<image_soft_token>", 3),
        ("<start_of_turn>", 3),
        ("<end_of_turn>", 3),
        ("\n", 1),
        ("\n\n", 1),
    ):
        tokens.append(text)
        scores.append(0.0)
        types.append(kind)
    rng = np.random.default_rng(s.seed + 1)
    arch = "gemma3"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("bench-gemma3-text")
    w.add_context_length(4096)
    w.add_embedding_length(s.text_embd)
    w.add_block_count(s.text_layers)
    w.add_feed_forward_length(s.text_ffn)
    w.add_head_count(s.text_heads)
    w.add_head_count_kv(s.text_kv_heads)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_freq_base(1_000_000.0)
    w.add_float32(f"{arch}.rope.freq_base_swa", 10_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_uint32(f"{arch}.attention.sliding_window", 1024)
    add_spm_vocab(w, (tokens, scores, types))

    def matrix(name: str, out: int, inp: int, qtype: QT = QT.F16) -> None:
        data = rng.standard_normal((out, inp), dtype=np.float32) / np.float32(inp**0.5)
        add_tensor(w, name, data, qtype)

    def norm(name: str, n: int) -> None:
        add_tensor(w, name, 0.1 * rng.standard_normal(n))  # Gemma: times (1 + w), as converted

    e, hd = s.text_embd, s.head_dim
    matrix("token_embd.weight", len(tokens), e)
    for i in range(s.text_layers):
        b = f"blk.{i}."
        norm(b + "attn_norm.weight", e)
        matrix(b + "attn_q.weight", s.text_heads * hd, e)
        matrix(b + "attn_k.weight", s.text_kv_heads * hd, e)
        matrix(b + "attn_v.weight", s.text_kv_heads * hd, e)
        norm(b + "attn_q_norm.weight", hd)
        norm(b + "attn_k_norm.weight", hd)
        matrix(b + "attn_output.weight", e, s.text_heads * hd)
        norm(b + "post_attention_norm.weight", e)
        norm(b + "ffn_norm.weight", e)
        matrix(b + "ffn_gate.weight", s.text_ffn, e)
        matrix(b + "ffn_up.weight", s.text_ffn, e)
        matrix(b + "ffn_down.weight", e, s.text_ffn)
        norm(b + "post_ffw_norm.weight", e)
    norm("output_norm.weight", e)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def photo(width: int, height: int, seed: int = 0) -> bytes:
    """A JPEG (quality 90) of a photo-like picture: smooth gradients, shapes and noise."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack(
        [
            128 + 100 * np.sin(x / 300),
            128 + 100 * np.cos(y / 200),
            255 * (x + y) / (width + height),
        ],
        -1,
    )
    noisy = base + rng.normal(0, 12, base.shape).astype(np.float32)
    img = Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(40):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        r = int(rng.integers(50, 600))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        draw.ellipse((x0 - r, y0 - r, x0 + r, y0 + r), fill=colour)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def square(size: int) -> bytes:
    """A PNG at the tower's size (no resize on either side)."""
    from PIL import Image

    data = io.BytesIO(photo(size, size, seed=1))
    buf = io.BytesIO()
    Image.open(data).save(buf, format="PNG")
    return buf.getvalue()


def prepare(folder: Path, s: Sizes) -> dict[str, Path]:
    """The model files and pictures in `folder`, written unless a complete set is there."""
    files = {
        "mmproj": folder / "mmproj-gemma3-4b-bench-f16.gguf",
        "text": folder / "gemma3-text-bench-f16.gguf",
        "jpeg": folder / "photo-12mp.jpg",
        "png": folder / f"picture-{s.image_size}.png",
    }
    stamp = folder / "built.json"
    want = json.dumps(asdict(s), sort_keys=True)
    if stamp.is_file() and stamp.read_text() == want and all(p.is_file() for p in files.values()):
        return files
    folder.mkdir(parents=True, exist_ok=True)
    print(f"writing the files into {folder} (once; about 1 GB)...", file=sys.stderr)
    stamp.unlink(missing_ok=True)
    write_mmproj(files["mmproj"], s)
    write_text_model(files["text"], s)
    files["jpeg"].write_bytes(photo(4000, 3000))
    files["png"].write_bytes(square(s.image_size))
    stamp.write_text(want)
    return files


def hearth(files: dict[str, Path], s: Sizes, threads: int, repeats: int) -> dict[str, float]:
    from hearth.engine.forward import ForwardEngine
    from hearth.engine.input import PassInput
    from hearth.plugins.registry import load_installed_model
    from hearth.runner.prompt_inputs import build_prompt
    from hearth_gemma3.image import preprocess

    out: dict[str, float] = {}
    jpeg = files["jpeg"].read_bytes()
    times = []
    for _ in range(repeats + 1):  # the first warms up
        t0 = time.perf_counter()
        preprocess(jpeg, s.image_size, (0.5,) * 3, (0.5,) * 3)
        times.append(time.perf_counter() - t0)
    out["preprocess_s"] = statistics.median(times[1:])

    t0 = time.perf_counter()
    loaded = load_installed_model(files["text"], projector=files["mmproj"], num_threads=threads)
    engine = ForwardEngine(loaded, num_ctx=1024, num_batch=512)
    out["load_s"] = time.perf_counter() - t0
    try:
        png = files["png"].read_bytes()
        t0 = time.perf_counter()
        ids, _ = build_prompt(
            "[img-0]",
            [png],
            loaded.model,
            engine,
            lambda text, special: loaded.tokenizer.encode(text, add_special=special),
        )
        out["build_s"] = time.perf_counter() - t0  # decoding, preprocessing, the graph
        first = next(i for i, t in enumerate(ids) if t < 0)
        n_image = sum(1 for t in ids if t < 0)
        t0 = time.perf_counter()
        engine.multimodal.embeddings(engine.multimodal.image_id(_digest(png)))
        out["encode_s"] = time.perf_counter() - t0

        tokens = np.array(ids, dtype=np.int32)
        engine.cache.remove(0, 0)
        engine.forward(
            PassInput(tokens[:first], np.arange(first), np.zeros(first), np.array([first - 1]))
        )
        image = tokens[first : first + n_image]
        positions = np.arange(first, first + n_image)
        times = []
        for _ in range(repeats):
            engine.cache.remove(0, first)
            t0 = time.perf_counter()
            engine.forward(PassInput(image, positions, np.zeros(n_image), np.array([n_image - 1])))
            times.append(time.perf_counter() - t0)
        out["image_tokens"] = n_image
        out["decode_s"] = statistics.median(times)
    finally:
        engine.close()
        loaded.close()
    return out


def _digest(data: bytes) -> int:
    from hearth.engine.multimodal_store import image_hash

    return image_hash(data)


def llamacpp(files: dict[str, Path], threads: int, repeats: int) -> dict[str, float]:
    from hearth.plugins.testing import run_oracle
    from hearth.plugins.testing.llamacpp_mtmd import LLAMACPP_MTMD

    base = {
        "model": str(files["text"]),
        "mmproj": str(files["mmproj"]),
        "threads": threads,
        "n_ctx": 1024,
        "n_batch": 512,
    }
    with tempfile.TemporaryDirectory() as tmp:
        pre = run_oracle(
            LLAMACPP_MTMD,
            {**base, "images": [str(files["jpeg"])], "prompt": "<__media__>", "preprocess_only": 1},
            tmp,
        )
        enc = run_oracle(
            LLAMACPP_MTMD,
            {
                **base,
                "images": [str(files["png"])],
                "prompt": "\n\n<__media__>\n\n",
                "decode_repeats": repeats,
            },
            tmp,
        )
    return {
        "decode_file_s": float(pre["bitmap_s"][0]),
        "preprocess_s": float(pre["bitmap_s"][0] + pre["tokenize_s"][0]),
        "encode_s": float(enc["encode_s"][0]),
        "image_tokens": float(len(enc["image_embd_0"])),
        "decode_s": float(np.median(enc["decode_s"][0])),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="for (a) and (c), per round")
    ap.add_argument(
        "--rounds", type=int, default=1, help="rounds of both engines (each encodes once)"
    )
    ap.add_argument(
        "--dir", type=Path, default=Path.home() / ".cache" / "hearth-bench" / "vision-encode"
    )
    ap.add_argument("--layers", type=int, default=Sizes.vision_layers, help="tower layers")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from hearth.plugins.testing.llamacpp_mtmd import libmtmd_missing

    sizes = Sizes(vision_layers=args.layers)
    files = prepare(args.dir, sizes)
    missing = libmtmd_missing()
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    for r in range(args.rounds):  # alternating which engine goes first
        if r % 2 == 0:
            ours.append(hearth(files, sizes, args.threads, args.repeats))
        if missing is None:
            theirs.append(llamacpp(files, args.threads, args.repeats))
        if r % 2 == 1:
            ours.append(hearth(files, sizes, args.threads, args.repeats))

    def median(runs: list[dict[str, float]], key: str, rate: bool = False) -> float | None:
        if not runs:
            return None
        return statistics.median(r["image_tokens"] / r[key] if rate else r[key] for r in runs)

    print(cpu_description())
    print(
        f"Gemma 3 4B-sized image encoder ({sizes.image_size} px, {sizes.vision_layers} layers "
        f"of {sizes.vision_embd}, random F16 weights) with a {sizes.text_layers}-layer text "
        f"model of {sizes.text_embd}; {args.threads} threads; {args.rounds} round(s), engines "
        f"alternating; medians over rounds of: (a) and (c) medians of {args.repeats}, (b) one "
        "encode per round (it takes tens of seconds on two cores)"
    )
    if missing is not None:
        print(f"llama.cpp's multimodal library is missing ({missing}): Hearth's figures only")
    rows = [
        ("(a) preprocess 12 MP JPEG, ms", "preprocess_s", 1000.0, "time", "Hearth < 150 ms"),
        ("(b) encode one image, s", "encode_s", 1.0, "time", "ratio <= 1.1"),
        ("(c) 256 image tokens, tok/s", "decode_s", 0.0, "rate", ""),
    ]
    print(f"{'':32}{'Hearth':>10}{'llama.cpp':>11}{'Hearth/llama.cpp':>18}  target")
    for label, key, unit, kind, target in rows:
        o = median(ours, key, rate=not unit)
        t = median(theirs, key, rate=not unit)
        assert o is not None
        o, t = (o * unit, t * unit if t is not None else None) if unit else (o, t)
        ratio = f"{o / t:.2f} ({kind})" if t else "-"
        their = f"{t:11.1f}" if t is not None else f"{'-':>11}"
        print(f"{label:32}{o:10.1f}{their}{ratio:>18}  {target}")
    if args.rounds > 1:
        mine = ", ".join(f"{r['encode_s']:.1f}" for r in ours)
        other = ", ".join(f"{r['encode_s']:.1f}" for r in theirs) or "-"
        print(f"(b) each round, s: Hearth {mine}; llama.cpp {other}")
    if theirs:
        decode = median(theirs, "decode_file_s")
        total = median(theirs, "preprocess_s")
        assert decode is not None and total is not None
        print(
            f"llama.cpp (a): stb_image decoding {decode * 1000:.1f} ms, resize and "
            f"normalisation {(total - decode) * 1000:.1f} ms"
        )
    print(
        f"Hearth: loading the pair and reserving memory {ours[0]['load_s']:.1f} s; building "
        f"the prompt (decoding and preprocessing the {sizes.image_size} px PNG, the encoder "
        f"graph) {ours[0]['build_s'] * 1000:.0f} ms, not in (b)"
    )


if __name__ == "__main__":
    main()
