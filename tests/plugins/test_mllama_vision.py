"""Llama 3.2 Vision's image encoder (hearth_mllama.vision) against transformers, on a tiny
random MllamaForConditionalGeneration (hearth_mllama.testing), in both file
layouts Ollama uses: its one file, made by Hearth's converter from the saved checkpoint
(`hearth.convert` with plugins/mllama/convert.py, as `hearth create` does), and its registry
layout's projector file, written here with the converter's names and repacks.

Which semantics are compared: Meta's (and Ollama's and vLLM's), the intermediate features
taken from each selected local layer's INPUT. transformers >= 4.54 takes each layer's output;
the reference here is transformers' MllamaVisionModel patched to record layer inputs
(`meta_semantics`), and `test_unpatched_transformers_differs` shows that the choice matters.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from hearth.engine.gguf import GGUFFile
from hearth.engine.ml.ggml import GGMLBackend
from hearth.engine.ml.weights import WeightStore
from hearth_mllama.image import TiledImage, preprocess
from hearth_mllama.testing import (
    TinyMllamaVision,
    meta_semantics,
    reference_states,
    tiny_mllama,
    vision_keys,
    vision_tensors,
    write_vision_gguf,
)
from hearth_mllama.vision import VisionConfig, VisionEncoder
from tests.plugins.mllama_checkpoint import convert_tiny

SPEC = TinyMllamaVision(vocab=300)  # room for a byte-level BPE tokenizer


def _png(width: int, height: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


# name -> (bytes, tiles used): wide (1 x 4 tiles), tall (4 x 1), small (1), 2 x 2, 2 x 1.
IMAGES = {
    "wide": (_png(300, 40, 1), 4),
    "tall": (_png(50, 400, 2), 4),
    "small": (_png(8, 6, 3), 1),
    "square": (_png(100, 90, 4), 4),
    "two": (_png(40, 100, 5), 2),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(transformers' model patched to Meta's semantics, the converter's file of it)."""
    m = tiny_mllama(SPEC)
    path = tmp_path_factory.mktemp("mllama-file") / "model.gguf"
    convert_tiny(m, tmp_path_factory.mktemp("mllama-hf"), path)
    meta_semantics(m.model.vision_model)
    return m, path


@pytest.fixture(scope="module")
def reference(checkpoint):
    return checkpoint[0]


@pytest.fixture(scope="module", params=["ollama", "projector"])
def encoder(request, checkpoint, tmp_path_factory):
    """(layout, encoder, backend): the encoder loaded alone through Hearth's backend, from
    Ollama's one file or from its registry layout (a text file and a projector file)."""
    model, converted = checkpoint
    backend = GGMLBackend(num_threads=2)
    if request.param == "ollama":
        file, proj = GGUFFile(converted), None
        meta = file.metadata
    else:
        folder = tmp_path_factory.mktemp("mllama-projector")
        tensors = vision_tensors(model.model.vision_model, model.model.multi_modal_projector)
        keys = vision_keys(model.config.vision_config)
        stub = {"token_embd.weight": np.zeros((SPEC.vocab, SPEC.text_hidden), np.float32)}
        file = GGUFFile(write_vision_gguf(folder / "text.gguf", stub, {}))
        proj = GGUFFile(write_vision_gguf(folder / "proj.gguf", tensors, keys, "projector"))
        meta = file.metadata.with_projector(proj.metadata)
    config = VisionConfig.from_gguf(meta)
    assert config is not None and config.naming == request.param
    store = WeightStore(backend, file, proj)
    enc = VisionEncoder(config, store)
    assert enc.naming == request.param
    enc.check()
    store.load()
    yield enc, backend
    store.close()
    backend.close()
    for f in (file, proj):
        if f is not None:
            f.close()


def _encode(enc: VisionEncoder, backend: GGMLBackend, tiled: TiledImage) -> np.ndarray:
    ctx = backend.new_context()
    try:
        out = enc.forward(ctx, tiled)
        ctx.compute(out)
        return np.asarray(out.numpy(), dtype=np.float32)
    finally:
        ctx.close()


def _tiles(name: str) -> TiledImage:
    return preprocess(IMAGES[name][0], image_size=SPEC.image_size, max_num_tiles=SPEC.max_num_tiles)


def test_settings_from_the_file(encoder):
    cfg = encoder[0].config
    assert (cfg.image_size, cfg.patch_size, cfg.max_num_tiles) == (56, 14, 4)
    assert (cfg.embedding_length, cfg.head_count, cfg.feed_forward_length) == (32, 2, 48)
    assert (cfg.block_count, cfg.global_block_count) == (4, 2)
    assert cfg.intermediate_layers == (0, 2)
    assert (cfg.num_patches, cfg.padded_patches, cfg.features) == (17, 24, 96)
    assert encoder[0].output_length == SPEC.text_hidden


@pytest.mark.parametrize("name", list(IMAGES))
def test_projected_states_match_transformers(reference, encoder, name):
    enc, backend = encoder
    tiled = _tiles(name)
    assert tiled.num_tiles == IMAGES[name][1]
    want = reference_states(reference, tiled.pixels, tiled.aspect_ratio_id, tiled.num_tiles)
    ours = _encode(enc, backend, tiled)
    assert ours.shape == want.shape == (tiled.num_tiles * 17, SPEC.text_hidden)
    scale = float(np.abs(want).max())
    diff = float(np.abs(ours - want).max())
    print(
        f"{enc.naming} {name}: {tiled.num_tiles} tiles, max |diff| {diff:.2e} (scale {scale:.2f})"
    )
    assert diff <= 1e-4 * scale


def test_unpatched_transformers_differs(reference, encoder):
    """transformers >= 4.54's own semantics (intermediate = layer outputs) give other
    states: the comparison above tells the two apart."""
    enc, backend = encoder
    plain = tiny_mllama(SPEC)
    tiled = _tiles("square")
    ours = _encode(enc, backend, tiled)
    theirs = reference_states(plain, tiled.pixels, tiled.aspect_ratio_id, tiled.num_tiles)
    meta = reference_states(reference, tiled.pixels, tiled.aspect_ratio_id, tiled.num_tiles)
    scale = float(np.abs(meta).max())
    assert float(np.abs(theirs - meta).max()) > 1e-2 * scale
    assert float(np.abs(ours - theirs).max()) > 1e-2 * scale


def test_padding_tiles_are_masked_as_transformers_does(reference, encoder):
    """A one-tile image: the three empty tiles still take part (real rows attend to them);
    dropping them, or masking them fully, would change the result."""
    enc, backend = encoder
    tiled = _tiles("small")
    ours = _encode(enc, backend, tiled)
    other = TiledImage(tiled.pixels.copy(), tiled.aspect_ratio_id, tiled.num_tiles)
    other.pixels[1:] = 1.0  # the unused tiles' pixels reach the real rows through attention
    assert float(np.abs(_encode(enc, backend, other) - ours).max()) > 1e-4


def test_bad_tiles_raise_value_error(encoder):
    enc, backend = encoder
    ctx = backend.new_context()
    try:
        with pytest.raises(ValueError, match="tiles"):
            enc.forward(ctx, TiledImage(np.zeros((2, 3, 56, 56), np.float32), 1, 1))
        with pytest.raises(ValueError, match="aspect ratio id"):
            enc.forward(ctx, TiledImage(np.zeros((4, 3, 56, 56), np.float32), 9, 1))
    finally:
        ctx.close()


def test_a_file_without_the_encoder_has_no_vision_config(tmp_path):
    stub = {"token_embd.weight": np.zeros((4, 8), np.float32)}
    file = GGUFFile(write_vision_gguf(tmp_path / "text.gguf", stub, {}))
    try:
        assert VisionConfig.from_gguf(file.metadata) is None
    finally:
        file.close()
