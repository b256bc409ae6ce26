"""Gemma 3 vision against llama.cpp's multimodal library (libmtmd), a second reference beside
transformers (test_gemma3_vision.py), on the same tiny random model converted by llama.cpp's
converter. llama.cpp runs in its own process (hearth.plugins.testing.llamacpp_mtmd).

What is comparable, and what is not:

* The pictures are PNGs at the tower's own size (64x64), so no resize happens on either side:
  llama.cpp's resize is its own, not Pillow's, and would differ by a grey level here and
  there. PNG, not JPEG: llama.cpp decodes with stb_image, whose JPEG decoder is not libjpeg.
* Image embeddings: llama.cpp rounds the projector's input to F16 (the input projection is an
  F16 weight, and its matrix product converts the activations), runs the tower's attention
  as F16 flash attention and its GELU from ggml's F16 table; Hearth keeps those in F32, as
  transformers does. Hence a relative tolerance (max |diff| / max |value|) of 5e-3.
* The prompt layout: mtmd writes `<start_of_image>` and `<end_of_image>` around an image,
  without the `\\n\\n` before and after that Gemma3Processor (and Hearth's `image_text`)
  write. The prompts given to mtmd carry those newlines themselves, so both engines see the
  same positions, which the test checks first; the logits and greedy tokens are then those of
  identical inputs, each engine with its own image embeddings.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from hearth.engine.forward import ForwardEngine
from hearth.engine.input import PassInput
from hearth.engine.model import load_model
from hearth.engine.multimodal import encode_image
from hearth.plugins.registry import default_registry
from hearth.plugins.testing import ConverterUnavailableError, run_oracle
from hearth.plugins.testing.llamacpp_mtmd import LLAMACPP_MTMD, libmtmd_missing
from hearth.plugins.testing.parity import greedy
from hearth_gemma3.testing import build_tiny_gemma3_vision

pytestmark = pytest.mark.slow

PROMPTS = {
    "chat": "<start_of_turn>user\n[img-0]Describe this.<end_of_turn>\n<start_of_turn>model\n",
    "two": "<start_of_turn>user\nTwo pictures: [img-0] and [img-1], compared.<end_of_turn>\n"
    "<start_of_turn>model\n",
}
MARKER = "[img]"  # what stands for mtmd's marker in the prompts given to the oracle
GREEDY = 8
EMBEDDING_TOLERANCE = 5e-3  # relative: max |diff| / max |value|
LOGIT_TOLERANCE = 5e-3  # absolute, logits of a few units


def pictures(size: int) -> list[bytes]:
    """Two PNGs of `size` x `size` pixels: a noisy gradient and noisy stripes."""
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:size, 0:size]
    gradient = np.stack([x * 255 / (size - 1), y * 255 / (size - 1), (x + y) % 256], -1)
    stripes = np.stack([(x // 4 % 2) * 200, (y // 8 % 2) * 180, np.full_like(x, 90)], -1)
    out = []
    for base in (gradient, stripes):
        pixels = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    reason = libmtmd_missing()
    if reason is not None:
        pytest.skip(f"llama.cpp's multimodal library cannot be loaded: {reason}")
    try:
        return build_tiny_gemma3_vision(tmp_path_factory.mktemp("gemma3-vision-mtmd"))
    except ConverterUnavailableError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def images(files, tmp_path_factory):
    folder = tmp_path_factory.mktemp("mtmd-images")
    paths = []
    for i, data in enumerate(pictures(files.spec.image_size)):
        path = folder / f"picture-{i}.png"
        path.write_bytes(data)
        paths.append(path)
    return paths


@pytest.fixture(scope="module", params=["llama.cpp", "ollama"])
def loaded(request, files):
    if request.param == "llama.cpp":
        model = load_model(files.text, registry=default_registry(), projector=files.mmproj)
    else:
        model = load_model(files.ollama, registry=default_registry())
    yield model
    model.close()


def mtmd_prompt(prompt: str, image_text: tuple[str, str], n_images: int) -> str:
    """The prompt as mtmd must get it to lay out what Hearth lays out: Hearth's `image_text`
    around each image, less the `<start_of_image>` / `<end_of_image>` mtmd writes itself."""
    before, after = image_text
    assert before.endswith("<start_of_image>") and after.startswith("<end_of_image>")
    extra_before = before.removesuffix("<start_of_image>")
    extra_after = after.removeprefix("<end_of_image>")
    for i in range(n_images):
        prompt = prompt.replace(f"[img-{i}]", extra_before + MARKER + extra_after)
    return prompt


@pytest.fixture(scope="module", params=list(PROMPTS))
def oracle(request, files, images, loaded, tmp_path_factory):
    """(prompt name, prompt, image paths, libmtmd's results)."""
    name = request.param
    prompt = PROMPTS[name]
    used = images[: prompt.count("[img-")]
    req = {
        "model": str(files.text),
        "mmproj": str(files.mmproj),
        "images": [str(p) for p in used],
        "prompt": mtmd_prompt(prompt, type(loaded.model).image_text, len(used)),
        "marker": MARKER,
        "threads": 2,
        "n_ctx": 256,
        "n_batch": 128,
        "greedy": GREEDY,
        "helper_check": True,
    }
    tmp = tmp_path_factory.mktemp(f"mtmd-{name}")
    return name, prompt, used, run_oracle(LLAMACPP_MTMD, req, tmp)


def test_image_embeddings_match_libmtmd(loaded, oracle):
    name, _, paths, theirs = oracle
    for i, path in enumerate(paths):
        ours = encode_image(loaded, path.read_bytes())
        want = theirs[f"image_embd_{i}"]
        assert ours.shape == want.shape == (16, 64)
        diff = float(np.abs(ours - want).max())
        scale = float(np.abs(want).max())
        naming = loaded.model.vision.naming
        print(f"{naming} {name} image {i}: max |diff| {diff:.2e}, relative {diff / scale:.2e}")
        assert diff <= EMBEDDING_TOLERANCE * scale


def test_logits_and_greedy_tokens_match_libmtmd(loaded, oracle):
    """The same positions (checked), then the last position's logits and a greedy
    continuation. llama.cpp's own `mtmd_helper_eval_chunks` gives the oracle's logits too."""
    from hearth.runner.prompt_inputs import build_prompt

    name, prompt, paths, theirs = oracle
    np.testing.assert_array_equal(theirs["logits_helper"], theirs["logits"])
    engine = ForwardEngine(loaded, num_ctx=256, num_batch=128)
    try:
        ids, _ = build_prompt(
            prompt,
            [p.read_bytes() for p in paths],
            loaded.model,
            engine,
            lambda text, special: loaded.tokenizer.encode(text, add_special=special),
        )
        assert [max(t, -1) for t in ids] == theirs["ids"].tolist()
        n = len(ids)
        rows = np.arange(n, dtype=np.int32)
        logits = engine.forward(PassInput(np.array(ids), rows, np.zeros(n, np.int32), rows))[-1]
        diff = float(np.abs(logits - theirs["logits"]).max())
        top = np.sort(theirs["logits"])[-2:]
        print(
            f"{loaded.model.vision.naming} {name}: last logits max |diff| {diff:.2e} "
            f"(top-2 gap {top[1] - top[0]:.3f})"
        )
        assert diff < LOGIT_TOLERANCE
        ours = greedy(engine, logits, n, len(theirs["greedy"]))
        assert ours == theirs["greedy"].tolist()
    finally:
        engine.close()
