"""Gemma 3 vision against transformers, on a tiny random Gemma3ForConditionalGeneration
converted by llama.cpp's own converter (hearth_gemma3.testing): pixel values,
image features, the prompt layout, and logits with an image in the prompt."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageOps

from hearth.engine.input import Input, image_positions
from hearth.engine.model import ModelLoadError, load_model
from hearth.engine.multimodal import encode_image, encode_items
from hearth.plugins import MultimodalNotSupportedError
from hearth.plugins.registry import default_registry
from hearth.plugins.testing import ConverterUnavailableError, sample_images
from hearth_gemma3.image import preprocess
from hearth_gemma3.testing import (
    build_tiny_gemma3_vision,
    reference,
    reference_image_features,
    reference_pixel_values,
)

pytestmark = pytest.mark.slow

IMAGES = sample_images()
PARITY_IMAGES = ["normal", "tall", "tiny", "jpeg", "rgba", "palette", "grey", "animated"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    try:
        return build_tiny_gemma3_vision(tmp_path_factory.mktemp("gemma3-vision"))
    except ConverterUnavailableError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def ref(files):
    return reference(files)


@pytest.fixture(scope="module", params=["llama.cpp", "ollama"])
def loaded(request, files):
    if request.param == "llama.cpp":
        model = load_model(files.text, registry=default_registry(), projector=files.mmproj)
    else:
        model = load_model(files.ollama, registry=default_registry())
    yield model
    model.close()


def test_both_layouts_read_the_same_settings(files, loaded):
    vision = loaded.config.vision
    assert vision is not None and loaded.model.vision.naming == vision.naming
    spec = files.spec
    assert (vision.image_size, vision.patch_size) == (spec.image_size, spec.patch_size)
    assert (vision.embedding_length, vision.feed_forward_length) == (
        spec.vision_embd,
        spec.vision_ffn,
    )
    assert (vision.block_count, vision.head_count) == (spec.vision_layers, spec.vision_heads)
    assert vision.tokens_per_image == spec.tokens_per_image and vision.kernel == 2
    assert vision.image_mean == vision.image_std == (0.5, 0.5, 0.5)
    ids = loaded.config.image_tokens
    assert (ids.start, ids.end, ids.soft) == (files.boi, files.eoi, files.image_token)
    assert loaded.tokenizer.token_id("\n\n") == ids.newlines


@pytest.mark.parametrize("name", [*PARITY_IMAGES, "exif"])
def test_pixel_values_equal_transformers(ref, name):
    _, processor = ref
    data = IMAGES[name]
    ours = preprocess(data, 64, (0.5,) * 3, (0.5,) * 3)
    if name == "exif":  # transformers ignores the orientation; give it the upright picture
        upright = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
        out = processor.image_processor(images=[upright], return_tensors="np")
        want = np.asarray(out["pixel_values"][0])
    else:
        want = reference_pixel_values(processor, data)
    assert ours.shape == want.shape == (3, 64, 64)
    np.testing.assert_array_equal(ours, want)


@pytest.mark.parametrize("name", PARITY_IMAGES)
def test_image_features_match_transformers(ref, loaded, name):
    model, processor = ref
    want = reference_image_features(model, processor, IMAGES[name])  # [16, 64]
    ours = encode_image(loaded, IMAGES[name])
    assert ours.shape == want.shape == (16, 64)
    scale = float(np.abs(want).max())
    diff = float(np.abs(ours - want).max())
    print(f"{loaded.model.vision.naming} {name}: max |diff| {diff:.2e}, scale {scale:.2f}")
    assert diff <= 1e-4 * scale


def test_the_item_is_bidirectional_with_its_rows(loaded):
    [(item, values)] = encode_items(loaded, IMAGES["normal"])
    assert item.bidirectional and item.rows == 16 and item.tensor is None
    assert values.shape == (16, 64) and values.dtype == np.float32


def test_bytes_that_are_no_image_raise_value_error(loaded):
    ctx = loaded.backend.new_context()
    try:
        with pytest.raises(ValueError, match="not an image"):
            loaded.model.encode_multimodal(ctx, b"GIF89a but not really")
    finally:
        ctx.close()


PROMPTS = [
    "<start_of_turn>user\n<start_of_image>Describe this.<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nLook:<start_of_image>\nWhat is it?<end_of_turn>\n",
    "Two pictures: <start_of_image> and <start_of_image>, compared.",
    "<start_of_image>",
]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_prompt_layout_equals_the_processors(ref, files, loaded, prompt):
    """The runner writes `image_text` around each image and tokenizes it with the text;
    post_tokenize and the core lay the image out as encode_multimodal's item declares. The
    result is Gemma3Processor's input_ids (the image positions being its
    <image_soft_token>s)."""
    _, processor = ref
    before, after = type(loaded.model).image_text
    tok = loaded.tokenizer
    parts = prompt.split("<start_of_image>")
    items = [item for item, _ in encode_items(loaded, IMAGES["tiny"])]
    inputs = [Input(token=t) for t in tok.encode(parts[0] + (before if len(parts) > 1 else ""))]
    for k, text in enumerate(parts[1:]):
        inputs.append(Input(multimodal=items, multimodal_hash=100 + k))
        tail = after + text + (before if k + 2 < len(parts) else "")
        inputs.extend(Input(token=t) for t in tok.encode(tail, add_special=False))
    out = image_positions(loaded.model.post_tokenize(inputs))
    pictures = [Image.open(io.BytesIO(IMAGES["tiny"]))] * (len(parts) - 1)
    want = processor(text=prompt, images=pictures or None)
    assert [i.token for i in out] == want["input_ids"][0]
    is_image = [1 if i.multimodal_hash else 0 for i in out]
    assert is_image == want["token_type_ids"][0]
    firsts = [i for i in out if i.multimodal]
    assert [i.same_batch for i in firsts] == [15] * (len(parts) - 1)


def test_text_only_files_take_no_images(files, gemma3_path):
    for path in (files.text, gemma3_path):
        model = load_model(path, registry=default_registry())
        try:
            assert model.config.vision is None and model.model.vision is None
            ctx = model.backend.new_context()
            with pytest.raises(MultimodalNotSupportedError, match="mmproj"):
                model.model.encode_multimodal(ctx, IMAGES["tiny"])
            ctx.close()
        finally:
            model.close()


def test_a_single_file_model_needs_no_projector(files):
    with pytest.raises(ModelLoadError, match="needs no projector file"):
        load_model(files.ollama, registry=default_registry(), projector=files.mmproj)


@pytest.mark.parametrize(
    ("text", "pictures"),
    [
        ("[img-0]Describe this.", ["normal"]),
        ("Compare [img-0] with[img-1] please", ["normal", "tiny"]),
        ("[img-0]What is tall here?", ["tall"]),
    ],
    ids=["one", "two-images", "tall"],
)
def test_logits_with_images_match_transformers(ref, files, loaded, text, pictures):
    """The whole path: the runner's prompt building and multimodal store, the forward pass
    with the images' embeddings and their bidirectional masks, against transformers' forward
    (final-position logits within 1e-3) and greedy generation (8 tokens equal). The KV cache
    is F32 here, as transformers keeps it: Hearth's default F16 cache (llama.cpp's too) adds
    about 1e-3 of its own."""
    prompt_inputs = pytest.importorskip("hearth.runner.prompt_inputs")
    import torch

    from hearth.engine.forward import ForwardEngine
    from hearth.engine.input import PassInput
    from hearth.engine.ml.tensor import DType
    from hearth.plugins.testing.parity import greedy

    model, processor = ref
    engine = ForwardEngine(loaded, num_ctx=256, num_batch=256, kv_dtype=DType.F32)
    try:
        prompt = f"<start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n"
        ids, _ = prompt_inputs.build_prompt(
            prompt,
            [IMAGES[p] for p in pictures],
            loaded.model,
            engine,
            lambda text, special: loaded.tokenizer.encode(text, add_special=special),
        )
        images = [Image.open(io.BytesIO(IMAGES[p])) for p in pictures]
        marked = prompt
        for i in range(len(pictures)):
            marked = marked.replace(f"[img-{i}]", "<start_of_image>")
        want = processor(text=marked, images=[images], return_tensors="pt")
        assert [i if i >= 0 else files.image_token for i in ids] == want["input_ids"][0].tolist()
        n = len(ids)
        rows = np.arange(n, dtype=np.int32)
        logits = engine.forward(PassInput(np.array(ids), rows, np.zeros(n, np.int32), rows))
        ours = greedy(engine, logits[-1], n, 8)
        with torch.no_grad():
            ref_logits = model(**want).logits[0].numpy()
            causal = model(input_ids=want["input_ids"], pixel_values=want["pixel_values"])
            theirs = model.generate(**want, max_new_tokens=8, do_sample=False)[0, n:].tolist()
        last = float(np.abs(logits[-1] - ref_logits[-1]).max())
        diff = float(np.abs(logits - ref_logits).max())
        off = float(np.abs(logits - causal.logits[0].numpy()).max())
        print(
            f"{loaded.model.vision.naming} {pictures}: final-position max |diff| {last:.2e}, "
            f"all positions {diff:.2e} (causal-only reference {off:.2f}); greedy {ours}"
        )
        assert last <= 1e-3
        assert diff <= 1e-3
        assert off > 50 * diff  # the images' bidirectional masks are in effect
        assert ours == theirs[: len(ours)]
    finally:
        engine.close()
