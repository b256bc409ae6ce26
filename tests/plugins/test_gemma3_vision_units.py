"""Gemma 3 vision, the fast parts: the ops the encoder adds, two-file models, image
preprocessing rules and the prompt layout. (The parity with transformers is in
test_gemma3_vision.py.)"""

from __future__ import annotations

import io
import math
from types import SimpleNamespace

import gguf
import numpy as np
import pytest
from PIL import Image

from hearth.engine.gguf import GGUFError, GGUFFile, Metadata
from hearth.engine.input import Input, Multimodal, image_positions
from hearth.engine.ml import full_attention, gelu_tanh, layer_norm, nn
from hearth.engine.ml.ggml import GGMLBackend
from hearth.engine.ml.reference import NumpyBackend
from hearth.engine.ml.weights import MissingTensorError, WeightStore
from hearth.engine.model import ModelLoadError, load_model
from hearth.plugins.images import MAX_PIXELS, decode
from hearth.plugins.registry import default_registry
from hearth_gemma3.image import preprocess
from hearth_gemma3.model import ImageTokens, Model
from hearth_gemma3.vision import VisionConfig

rng = np.random.default_rng(0)


def run(backend, build, *arrays):
    ctx = backend.new_context()
    try:
        out = build(ctx, *[ctx.from_numpy(a) for a in arrays])
        ctx.compute(out)
        return out.numpy()
    finally:
        ctx.close()


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# -- ops -------------------------------------------------------------------------------------


def _pool(x: np.ndarray, k: int, s: int, mode: str) -> np.ndarray:
    n, c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    out = np.empty((n, c, oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            win = x[:, :, i * s : i * s + k, j * s : j * s + k].astype(np.float64)
            out[:, :, i, j] = win.mean((2, 3)) if mode == "avg" else win.max((2, 3))
    return out


@pytest.mark.parametrize(
    ("kernel", "stride", "mode"), [(2, None, "avg"), (3, 1, "avg"), (2, 2, "max")]
)
def test_pool_2d_on_both_backends(backend, kernel, stride, mode):
    x = f32(2, 5, 6, 8)  # ggml [w=8, h=6, channels=5, n=2]
    want = _pool(x, kernel, stride or kernel, mode)
    for b in (backend, NumpyBackend()):
        got = run(b, lambda c, t: c.pool_2d(t, kernel, stride, mode), x)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_pool_2d_refuses_a_bad_window(backend):
    ctx = backend.new_context()
    try:
        with pytest.raises(ValueError, match="mode"):
            ctx.pool_2d(ctx.from_numpy(f32(1, 4, 4)), 2, mode="sum")
        with pytest.raises(ValueError, match="window"):
            ctx.pool_2d(ctx.from_numpy(f32(1, 4, 4)), 5)
    finally:
        ctx.close()


def test_gelu_tanh_is_float32_exact_where_ctx_gelu_is_not(backend):
    x = np.linspace(-8, 8, 20001, dtype=np.float32)
    xd = x.astype(np.float64)
    want = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd**3)))
    ours = run(backend, gelu_tanh, x)
    table = run(backend, lambda c, t: c.gelu(t), x)
    assert np.abs(ours - want).max() < 2e-6
    assert np.abs(table - want).max() > 1e-4  # ggml's F16 table (why gelu_tanh exists)
    np.testing.assert_allclose(run(NumpyBackend(), gelu_tanh, x), want, rtol=1e-6, atol=1e-6)


def test_layer_norm_with_weight_and_bias(backend):
    x, w, b = f32(5, 16), f32(16), f32(16)
    xd = x.astype(np.float64)
    want = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-6) * w + b
    got = run(backend, lambda c, t, tw, tb: layer_norm(c, t, tw, tb, 1e-6), x, w, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _attention(q, k, v, scale):  # numpy order: q [n_q, heads, d], k/v [n_kv, heads, d]
    s = np.einsum("qhd,khd->hqk", q.astype(np.float64), k.astype(np.float64)) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", p, v.astype(np.float64)).reshape(q.shape[0], -1)


@pytest.mark.parametrize("chunked", [False, True])
def test_full_attention(backend, monkeypatch, chunked):
    q, k, v = f32(7, 3, 8), f32(9, 3, 8), f32(9, 3, 8)
    if chunked:  # one head's scores per chunk
        monkeypatch.setattr(nn, "_SCORES_BYTES", 4 * 7 * 9)
    want = _attention(q, k, v, 0.3)
    for b in (backend, NumpyBackend()):
        got = run(b, lambda c, tq, tk, tv: full_attention(c, tq, tk, tv, 0.3), q, k, v)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- two files -------------------------------------------------------------------------------


def _write(path, arch, keys, tensors):
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in keys.items():
        if isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_array(key, value)
    for name, data in tensors.items():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


CLIP_KEYS = {
    "clip.projector_type": "gemma3",
    "clip.has_vision_encoder": True,
    "clip.vision.image_size": 64,
    "clip.vision.patch_size": 8,
    "clip.vision.embedding_length": 48,
    "clip.vision.feed_forward_length": 96,
    "clip.vision.block_count": 2,
    "clip.vision.attention.head_count": 3,
    "clip.vision.attention.layer_norm_epsilon": 1e-6,
    "clip.vision.image_mean": [0.48, 0.45, 0.4],
    "clip.vision.image_std": [0.27, 0.26, 0.28],
    "clip.vision.projector.scale_factor": 2,
}


def test_metadata_keeps_the_projector_apart():
    meta = Metadata({"general.architecture": "gemma3", "gemma3.block_count": 6})
    proj = Metadata({"general.architecture": "clip", **CLIP_KEYS})
    both = meta.with_projector(proj)
    assert both.uint("block_count") == 6 and both.projector is proj
    assert both.projector.uint("vision.image_size") == 64
    assert both.projector.string("projector_type") == "gemma3"
    assert meta.projector is None and not both.has("vision.image_size")


def test_vision_config_from_a_projector_file_and_from_ollama_keys():
    proj = Metadata({"general.architecture": "clip", **CLIP_KEYS})
    cfg = VisionConfig.from_metadata(Metadata({"general.architecture": "gemma3"}, proj))
    assert cfg is not None and cfg.naming == "llama.cpp"
    assert (cfg.image_size, cfg.patch_size, cfg.embedding_length, cfg.head_count) == (64, 8, 48, 3)
    assert cfg.tokens_per_image == 16 and cfg.kernel == 2
    assert cfg.image_mean == pytest.approx((0.48, 0.45, 0.4))
    cfg.check()
    no_factor = {k: v for k, v in CLIP_KEYS.items() if "scale_factor" not in k}
    no_factor["clip.vision.image_size"] = 896
    no_factor["clip.vision.patch_size"] = 14
    real = VisionConfig.from_metadata(
        Metadata({}, Metadata({"general.architecture": "clip", **no_factor}))
    )
    assert real is not None and (real.tokens_per_image, real.kernel) == (256, 4)

    ollama = Metadata(
        {
            "general.architecture": "gemma3",
            "gemma3.vision.block_count": 27,
            "gemma3.vision.image_size": 896,
            "gemma3.vision.patch_size": 14,
            "gemma3.vision.embedding_length": 1152,
            "gemma3.vision.feed_forward_length": 4304,
            "gemma3.vision.attention.head_count": 16,
            "gemma3.vision.attention.layer_norm_epsilon": 1e-6,
        }
    )
    cfg = VisionConfig.from_metadata(ollama)
    assert cfg is not None and cfg.naming == "ollama"
    assert (cfg.tokens_per_image, cfg.kernel, cfg.image_mean) == (256, 4, (0.5, 0.5, 0.5))
    cfg.check()
    assert VisionConfig.from_metadata(Metadata({"general.architecture": "gemma3"})) is None


def test_vision_config_refuses_other_projectors_and_bad_sizes():
    other = Metadata({"general.architecture": "clip", **CLIP_KEYS, "clip.projector_type": "mlp"})
    with pytest.raises(ValueError, match="'mlp', not Gemma 3"):
        VisionConfig.from_metadata(Metadata({}, other))
    proj = Metadata({"general.architecture": "clip", **CLIP_KEYS})
    cfg = VisionConfig.from_metadata(Metadata({}, proj))
    assert cfg is not None
    from dataclasses import replace

    with pytest.raises(ValueError, match="multiple of the patch size"):
        replace(cfg, image_size=60).check()
    with pytest.raises(ValueError, match="heads"):
        replace(cfg, head_count=5).check()
    with pytest.raises(ValueError, match="square"):
        replace(cfg, tokens_per_image=15).check()
    with pytest.raises(ValueError, match="pool evenly"):
        replace(cfg, tokens_per_image=9).check()


@pytest.fixture()
def projector_file(tmp_path):
    return _write(
        tmp_path / "mmproj.gguf",
        "clip",
        {k: v for k, v in CLIP_KEYS.items() if k != "general.architecture"},
        {"v.some.weight": f32(3, 4), "mm.other.weight": f32(4, 5).astype(np.float16)},
    )


def test_weight_store_reads_two_files(tiny_gemma3_path, projector_file):
    backend = GGMLBackend(num_threads=1)
    text, proj = GGUFFile(tiny_gemma3_path), GGUFFile(projector_file)
    store = WeightStore(backend, text, proj)
    try:
        assert store.has("v.some.weight") and store.has("token_embd.weight")
        a = store.require("v.some.weight")
        b = store.require("mm.other.weight", matmul=False)
        norm = store.require("output_norm.weight")
        with pytest.raises(MissingTensorError, match="tiny-gemma3.gguf and mmproj.gguf lack"):
            store.require("v.missing.weight")
        store.load()
        np.testing.assert_array_equal(a.numpy(), proj.tensor_numpy("v.some.weight"))
        np.testing.assert_array_equal(b.numpy(), proj.tensor_numpy("mm.other.weight"))
        np.testing.assert_array_equal(norm.numpy(), text.tensor_numpy("output_norm.weight"))
    finally:
        store.close()
        backend.close()
        text.close()
        proj.close()


def test_a_tensor_in_both_files_is_an_error(tiny_gemma3_path, tmp_path):
    dup = _write(tmp_path / "dup.gguf", "clip", {}, {"output_norm.weight": f32(64)})
    backend = GGMLBackend(num_threads=1)
    text, proj = GGUFFile(tiny_gemma3_path), GGUFFile(dup)
    try:
        with pytest.raises(GGUFError, match="both have tensor 'output_norm.weight'"):
            WeightStore(backend, text, proj)
    finally:
        backend.close()
        text.close()
        proj.close()


def test_load_model_checks_the_projector(tiny_gemma3_path, tmp_path, projector_file):
    registry = default_registry()
    # Any projector file is opened; the plugin refuses one it cannot use (here a text model).
    with pytest.raises(ModelLoadError, match="projector file is for 'an unknown model', not Gemma"):
        load_model(tiny_gemma3_path, registry=registry, projector=tiny_gemma3_path)
    other = _write(tmp_path / "llava.gguf", "clip", {**CLIP_KEYS, "clip.projector_type": "mlp"}, {})
    with pytest.raises(ModelLoadError, match="not Gemma 3"):
        load_model(tiny_gemma3_path, registry=registry, projector=other)
    # A gemma3 projector without the encoder's tensors: the first missing one is named.
    with pytest.raises(MissingTensorError, match="lack tensor 'v.patch_embd.weight'"):
        load_model(tiny_gemma3_path, registry=registry, projector=projector_file)


def test_a_text_file_alone_takes_no_images(tiny_gemma3_path):
    loaded = load_model(tiny_gemma3_path, registry=default_registry())
    try:
        assert loaded.config.vision is None and loaded.projector is None
        assert loaded.model.handles_multimodal()
        ctx = loaded.backend.new_context()
        from hearth.plugins import MultimodalNotSupportedError

        with pytest.raises(MultimodalNotSupportedError, match="no image encoder"):
            loaded.model.encode_multimodal(ctx, _png(np.zeros((4, 4, 3), np.uint8)))
        ctx.close()
    finally:
        loaded.close()


# -- preprocessing ---------------------------------------------------------------------------


def _png(arr: np.ndarray, mode: str | None = None) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr, mode).save(buf, format="PNG")
    return buf.getvalue()


def _expected(rgb: np.ndarray, size: int) -> np.ndarray:
    """The processor's steps written out: bilinear resize, 1/255, (x - 0.5) / 0.5."""
    img = Image.fromarray(rgb).resize((size, size), Image.Resampling.BILINEAR)
    x = (np.asarray(img).transpose(2, 0, 1).astype(np.float64) * (1 / 255)).astype(np.float32)
    return (x - np.float32(0.5)) / np.float32(0.5)


HALF = (0.5, 0.5, 0.5)


def test_preprocess_resizes_rescales_and_normalises():
    rgb = rng.integers(0, 256, (30, 50, 3), dtype=np.uint8)
    got = preprocess(_png(rgb), 16, HALF, HALF)
    assert got.shape == (3, 16, 16) and got.dtype == np.float32
    np.testing.assert_array_equal(got, _expected(rgb, 16))
    mean, std = (0.1, 0.2, 0.3), (0.5, 0.25, 0.125)
    other = preprocess(_png(rgb), 16, mean, std)
    x = _expected(rgb, 16) * np.float32(0.5) + np.float32(0.5)
    want = (x - np.float32(mean).reshape(3, 1, 1)) / np.float32(std).reshape(3, 1, 1)
    np.testing.assert_allclose(other, want, rtol=1e-6, atol=1e-6)


def test_transparency_is_composited_onto_white():
    rgba = np.zeros((8, 8, 4), np.uint8)
    rgba[..., 0] = 255  # red, fully transparent
    got = preprocess(_png(rgba, "RGBA"), 8, HALF, HALF)
    np.testing.assert_array_equal(got, np.ones_like(got))  # white
    rgba[..., 3] = 255
    got = preprocess(_png(rgba, "RGBA"), 8, HALF, HALF)
    np.testing.assert_array_equal(got[0], np.ones((8, 8), np.float32))
    np.testing.assert_array_equal(got[1:], -np.ones((2, 8, 8), np.float32))


def test_greyscale_palette_and_animated_pictures():
    grey = rng.integers(0, 256, (10, 12), dtype=np.uint8)
    got = preprocess(_png(grey, "L"), 8, HALF, HALF)
    assert np.array_equal(got[0], got[1]) and np.array_equal(got[1], got[2])
    np.testing.assert_array_equal(got, _expected(np.stack([grey] * 3, -1), 8))

    frames = [Image.new("RGB", (6, 6), (255, 0, 0)), Image.new("RGB", (6, 6), (0, 0, 255))]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    got = preprocess(buf.getvalue(), 4, HALF, HALF)
    assert got[0].min() > 0.9 and got[2].max() < -0.9  # the first (red) frame


def test_exif_orientation_is_applied():
    rgb = rng.integers(0, 256, (10, 30, 3), dtype=np.uint8)  # wide
    exif = Image.Exif()
    exif[0x0112] = 6  # display rotated 90 degrees clockwise
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG", exif=exif)
    img = decode(buf.getvalue())
    assert img.size == (10, 30)  # upright: tall
    np.testing.assert_array_equal(np.asarray(img), np.rot90(rgb, k=-1))


def test_bytes_that_are_not_a_picture_raise_a_sentence():
    with pytest.raises(ValueError, match="not an image"):
        preprocess(b"certainly not a picture", 8, HALF, HALF)
    png = _png(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="damaged or truncated"):
        preprocess(png[: len(png) // 2], 8, HALF, HALF)


def test_huge_pictures_are_refused_before_decoding():
    png = _png(np.zeros((30, 40, 3), np.uint8))
    with pytest.raises(ValueError, match="40x30 pixels; at most 1,000 pixels"):
        preprocess(png, 8, HALF, HALF, max_pixels=1000)
    big = Image.new("1", (9000, 9000))  # 81 million pixels in a small file
    buf = io.BytesIO()
    big.save(buf, format="PNG")
    assert MAX_PIXELS < 9000 * 9000
    with pytest.raises(ValueError, match="9000x9000 pixels"):
        preprocess(buf.getvalue(), 8, HALF, HALF)


# -- the prompt layout -----------------------------------------------------------------------

IDS = ImageTokens(start=7, end=8, soft=400, newlines=10)


def _layout(inputs, ids=IDS):
    """post_tokenize, then the core's layout of the images (`image_positions`)."""
    fake = SimpleNamespace(config=SimpleNamespace(image_tokens=ids))
    return image_positions(Model.post_tokenize(fake, inputs))  # type: ignore[arg-type]


def _image(rows=4, h=1234, soft=400):
    item = Multimodal(None, None, bidirectional=True, rows=rows, token=soft)
    return Input(multimodal=[item], multimodal_hash=h)


def test_an_image_is_laid_out_between_its_markers():
    inputs = [Input(token=2), Input(token=10), Input(token=7), _image(), Input(token=8), Input(10)]
    out = _layout(inputs)
    assert [i.token for i in out] == [2, 10, 7, 400, 400, 400, 400, 8, 10]
    first, rest = out[3], out[4:7]
    assert first.multimodal is inputs[3].multimodal and first.multimodal_hash == 1234
    assert first.same_batch == 3 and all(i.same_batch == 0 for i in out if i is not first)
    assert all(i.multimodal is None and i.multimodal_hash == 1234 for i in rest)
    assert all(i.multimodal_hash == 0 for i in out[:3] + out[7:])
    assert inputs[3].same_batch == 0  # inputs are not changed


def test_post_tokenize_adds_missing_markers_as_gemma3processor_would():
    out = _layout([Input(token=2), _image(rows=2, h=5), Input(token=99)])
    assert [i.token for i in out] == [2, 10, 7, 400, 400, 8, 10, 99]
    out = _layout([_image(rows=1, h=5), _image(rows=1, h=6)])
    assert [i.token for i in out] == [10, 7, 400, 8, 10, 10, 7, 400, 8, 10]
    assert [i.multimodal_hash for i in out] == [0, 0, 5, 0, 0, 0, 0, 6, 0, 0]
    no_soft = ImageTokens(start=7, end=8, soft=-1, newlines=-1)
    out = _layout([_image(rows=2, soft=0)], no_soft)
    assert [i.token for i in out] == [7, 0, 0, 8]
