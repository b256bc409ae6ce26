"""Llama 3.2 Vision image speed in Hearth beside transformers (PyTorch, CPU, float32), same
weights, same run: preprocessing a photo and encoding one 4-tile image.

    .venv/bin/python bench/mllama_vision.py [--threads 2] [--rounds 1] [--repeats 3]
                                            [--layers 32] [--global-layers 8]

The encoder is Llama 3.2 11B Vision's size (560 px tiles in 14 px patches, 4 tiles, 32 local
and 8 global layers of 1280 dimensions, 16 heads, feed-forward 5120, intermediate layers
3, 7, 15, 23, 30, projected to 4096) with random weights from a fixed seed: transformers'
`MllamaVisionModel` and projector (gates random too), its matrices rounded to F16 values,
written to a temporary GGUF with Ollama's names and repacks (F16 matrices, F32 vectors, as
Ollama's converter writes them; hearth_mllama.testing), loaded by Hearth's
`VisionEncoder` alone. The reference is the same model in transformers, float32, patched to
Meta's intermediate-layer semantics, with `torch.set_num_threads(--threads)`; both outputs
are compared (a sanity check: Hearth multiplies by F16 matrices, so they agree to about 1e-3).

Timed:

(a) preprocessing a 12-megapixel JPEG (4000x3000) into 4 tiles: Hearth's
    `image.preprocess` (Pillow decode, resize, pad, normalise, tiles) beside transformers'
    `MllamaImageProcessorPil` (Pillow decode included); medians of --repeats.
(b) encoding one 4-tile image: the built graph's compute in Hearth (building it is printed
    apart), the vision model and projector under `torch.no_grad()` in transformers; one encode
    per engine per round (minutes on two cores), engines alternating which goes first.

Memory: the model is built once in float32 (3.6 GB), written as F16 (1.8 GB) and memory-mapped
by Hearth; transformers' attention holds a 6432 x 6432 mask and scores per head.
--layers/--global-layers make a shallower encoder (a quick check; the figures are then not
Llama 3.2's).
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from machine import cpu_description  # noqa: E402
from vision_encode import photo  # noqa: E402

IMAGE, PATCH, TILES = 560, 14, 4
HIDDEN, HEADS, FFN, TEXT = 1280, 16, 5120, 4096
INTERMEDIATE = (3, 7, 15, 23, 30)
MEAN = [0.48145466, 0.4578275, 0.40821073]
STD = [0.26862954, 0.26130258, 0.27577711]


def build_reference(layers: int, global_layers: int, seed: int = 0) -> tuple[Any, Any]:
    """(vision model, projector) in transformers, float32, random, matrices F16-rounded."""
    import torch
    from transformers.models.mllama.configuration_mllama import MllamaVisionConfig
    from transformers.models.mllama.modeling_mllama import MllamaVisionModel

    from hearth_mllama.testing import meta_semantics

    kept = [i for i in INTERMEDIATE if i < layers] or [0]
    config = MllamaVisionConfig(
        hidden_size=HIDDEN,
        attention_heads=HEADS,
        intermediate_size=FFN,
        num_hidden_layers=layers,
        num_global_layers=global_layers,
        intermediate_layers_indices=kept,
        vision_output_dim=HIDDEN * (len(kept) + 1),
        image_size=IMAGE,
        patch_size=PATCH,
        max_num_tiles=TILES,
    )
    torch.manual_seed(seed)
    vision = MllamaVisionModel(config).eval()
    projector = torch.nn.Linear(config.vision_output_dim, TEXT).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in (vision, projector):
            for name, p in module.named_parameters():
                if p.ndim == 1 and p.numel() == 1:  # gates
                    p.copy_(0.3 + 0.4 * torch.randn(p.shape, generator=gen))
                elif p.ndim == 1:
                    p.copy_(
                        float("norm" in name or "layernorm" in name)
                        + 0.05 * torch.randn(p.shape, generator=gen)
                    )
                else:
                    p.copy_(
                        (torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5).half().float()
                    )
    return meta_semantics(vision), projector


def write_gguf(path: Path, vision: Any, projector: Any) -> None:
    from hearth_mllama.testing import vision_keys, vision_tensors, write_vision_gguf

    tensors = vision_tensors(vision, projector)
    write_vision_gguf(path, tensors, vision_keys(vision.config), dtype=np.float16)


def hearth_encode(path: Path, data: bytes, threads: int) -> tuple[np.ndarray, float, float]:
    """(states, build seconds, compute seconds) of one encode."""
    from hearth.engine.gguf import GGUFFile
    from hearth.engine.ml.ggml import GGMLBackend
    from hearth.engine.ml.weights import WeightStore
    from hearth_mllama.image import preprocess
    from hearth_mllama.vision import VisionConfig, VisionEncoder

    file = GGUFFile(path)
    backend = GGMLBackend(num_threads=threads)
    store = WeightStore(backend, file)
    try:
        config = VisionConfig.from_gguf(file.metadata)
        assert config is not None
        encoder = VisionEncoder(config, store)
        encoder.check()
        store.load()
        ctx = backend.new_context()
        try:
            t0 = time.perf_counter()
            tiled = preprocess(data, image_size=IMAGE, max_num_tiles=TILES)
            out = encoder.forward(ctx, tiled)
            t1 = time.perf_counter()
            ctx.compute(out)
            t2 = time.perf_counter()
            return np.asarray(out.numpy(), dtype=np.float32), t1 - t0, t2 - t1
        finally:
            ctx.close()
    finally:
        store.close()
        backend.close()
        file.close()


def torch_encode(
    vision: Any, projector: Any, data: bytes, threads: int
) -> tuple[np.ndarray, float]:
    import torch
    from PIL import Image
    from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil

    torch.set_num_threads(threads)
    proc = MllamaImageProcessorPil(
        size={"height": IMAGE, "width": IMAGE},
        max_image_tiles=TILES,
        image_mean=MEAN,
        image_std=STD,
    )
    inputs = proc(images=[[Image.open(io.BytesIO(data))]], return_tensors="pt")
    tiles = int(inputs["num_tiles"][0][0])
    t0 = time.perf_counter()
    with torch.no_grad():
        states = vision(
            pixel_values=inputs["pixel_values"],
            aspect_ratio_ids=inputs["aspect_ratio_ids"],
            aspect_ratio_mask=inputs["aspect_ratio_mask"],
        ).last_hidden_state
        out = projector(states)[0, 0, :tiles]
    t1 = time.perf_counter()
    return out.reshape(-1, TEXT).numpy(), t1 - t0


def preprocess_times(data: bytes, repeats: int) -> tuple[float, float]:
    from PIL import Image
    from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil

    from hearth_mllama.image import preprocess

    proc = MllamaImageProcessorPil(
        size={"height": IMAGE, "width": IMAGE},
        max_image_tiles=TILES,
        image_mean=MEAN,
        image_std=STD,
    )
    ours, theirs = [], []
    for _ in range(repeats + 1):  # the first of each is a warm-up
        t0 = time.perf_counter()
        preprocess(data, image_size=IMAGE, max_num_tiles=TILES)
        t1 = time.perf_counter()
        proc(images=[[Image.open(io.BytesIO(data))]], return_tensors="np")
        t2 = time.perf_counter()
        ours.append(t1 - t0)
        theirs.append(t2 - t1)
    return statistics.median(ours[1:]), statistics.median(theirs[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="for (a)")
    ap.add_argument("--rounds", type=int, default=1, help="encodes per engine, alternating")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--global-layers", type=int, default=8)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))

    jpeg = photo(4000, 3000)
    pre_ours, pre_theirs = preprocess_times(jpeg, args.repeats)
    vision, projector = build_reference(args.layers, args.global_layers)
    ours: list[float] = []
    theirs: list[float] = []
    builds: list[float] = []
    with tempfile.TemporaryDirectory(prefix="hearth-mllama-bench-") as tmp:
        path = Path(tmp) / "mllama-vision-f16.gguf"
        write_gguf(path, vision, projector)
        size_gb = path.stat().st_size / 1e9
        mine = other = None
        for r in range(args.rounds):
            if r % 2 == 0:
                mine, build, secs = hearth_encode(path, jpeg, args.threads)
                ours.append(secs)
                builds.append(build)
            other, secs = torch_encode(vision, projector, jpeg, args.threads)
            theirs.append(secs)
            if r % 2 == 1:
                mine, build, secs = hearth_encode(path, jpeg, args.threads)
                ours.append(secs)
                builds.append(build)
    assert mine is not None and other is not None
    rel = float(np.abs(mine - other).max() / np.abs(other).max())

    print(cpu_description())
    print(
        f"Llama 3.2 Vision-sized encoder ({IMAGE} px tiles, {TILES} tiles, {args.layers} + "
        f"{args.global_layers} layers of {HIDDEN}, projected to {TEXT}; random weights, "
        f"{size_gb:.2f} GB F16 GGUF); {args.threads} threads; reference: transformers "
        f"MllamaVisionModel + projector, torch CPU float32 (same weights, Meta semantics)"
    )
    rows = [
        ("(a) preprocess 12 MP JPEG, ms", pre_ours * 1000, pre_theirs * 1000),
        ("(b) encode one 4-tile image, s", statistics.median(ours), statistics.median(theirs)),
    ]
    print(f"{'':34}{'Hearth':>10}{'torch f32':>11}{'Hearth/torch':>14}")
    for label, o, t in rows:
        print(f"{label:34}{o:10.2f}{t:11.2f}{o / t:14.2f}")
    if args.rounds > 1:
        print(f"(b) each round, s: Hearth {ours}; torch {theirs}")
    build_ms = statistics.median(builds) * 1000
    print(
        f"Hearth: building the graph (preprocessing included) {build_ms:.0f} ms, "
        f"not in (b); output {mine.shape[0]} x {mine.shape[1]}, max |diff| / max |torch| {rel:.1e}"
    )


if __name__ == "__main__":
    main()
