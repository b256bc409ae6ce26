"""Llama 3.2 Vision (mllama): the text model with cross-attention against transformers.

A tiny random `MllamaForConditionalGeneration` (F32, `hearth_mllama.testing`:
image 56 in 14-pixel patches, 4 tiles, two cross-attention layers, every gate and norm weight
random) is saved as a Hugging Face folder with a byte-level BPE tokenizer (Llama 3's special
tokens and `<|image|>`), and imported through Hearth's converter (`hearth.convert` with
`hearth_mllama.convert`: Ollama's names, keys and repacks), as `hearth create` does.

The reference is transformers patched to Meta's semantics (llama-models'
`models/llama3/multimodal/model.py`, which the released weights were trained with) in two
places:

* the vision encoder's intermediate features are each selected layer's INPUT
  (`meta_semantics`; transformers >= 4.54 collects layer outputs);
* a text row before the image gets no cross-attention contribution: Meta's `CrossAttention`
  multiplies its attention output by `full_text_row_masked_out_mask` (and the block its
  feed-forward); transformers masks only the feed-forward, and the fully masked mask row it
  turns into a zero bias lets the attention output (uniform over every tile, padding tiles
  too) through (`meta_cross_attention`, in
  `hearth_mllama.testing`). `test_unpatched_transformers_differs` shows
  that this choice changes the final logits.

Rows at or after the image attend to the image's real tiles in both (transformers' mask rows
exclude the padding tiles), so images with fewer tiles than `max_num_tiles` are compared too.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from hearth.engine.forward import ForwardEngine
from hearth.engine.input import PassInput
from hearth.engine.ml.tensor import DType
from hearth.engine.model import load_model
from hearth.plugins.registry import default_registry
from hearth.plugins.testing.parity import greedy
from hearth_mllama.testing import (
    TinyMllamaVision,
    meta_cross_attention,
    meta_semantics,
    tiny_mllama,
    transformers_cross_attention,
)
from tests.plugins.mllama_checkpoint import convert_tiny

pytestmark = pytest.mark.slow

SPEC = TinyMllamaVision(vocab=300, text_layers=5, cross_attention_layers=(1, 3))
IMAGE_ID = SPEC.vocab - 1  # the tiny config's image_token_index


def _picture(width: int, height: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


# name -> (picture, tiles it uses of 4): 1x4, 4x1, 2x2, 2x1 and 1x1.
IMAGES = {
    "wide": (_picture(224, 50, 1), 4),
    "tall": (_picture(40, 200, 2), 4),
    "square": (_picture(100, 96, 3), 4),
    "two": (_picture(40, 100, 5), 2),
    "small": (_picture(8, 6, 4), 1),
}
HEADER = "<|start_header_id|>user<|end_header_id|>\n\n"
ASSISTANT = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(transformers' model patched to Meta's semantics, the converted GGUF's path)."""
    model = tiny_mllama(SPEC)
    path = tmp_path_factory.mktemp("mllama") / "tiny-mllama.gguf"
    convert_tiny(model, tmp_path_factory.mktemp("mllama-hf"), path)
    meta_semantics(model.model.vision_model)
    meta_cross_attention(model)
    model.generation_config.eos_token_id = None  # eight tokens, as Hearth's greedy takes them
    model.generation_config.pad_token_id = 0
    return model, path


@pytest.fixture(scope="module")
def loaded(tiny):
    return load_model(tiny[1], registry=default_registry())


def _engine(loaded, parallel: int = 1) -> ForwardEngine:
    return ForwardEngine(loaded, num_ctx=256, num_batch=64, parallel=parallel, kv_dtype=DType.F32)


def _prompt(loaded, engine, text: str, image: str) -> list[int]:
    from hearth.runner.prompt_inputs import build_prompt

    ids, marks = build_prompt(
        text,
        [IMAGES[image][0]],
        loaded.model,
        engine,
        lambda t, special: loaded.tokenizer.encode(t, add_special=special),
    )
    assert not any(marks)  # no input asks to share a batch with the image
    return ids


def _reference(model, loaded, ids: list[int], image: str, new: int = 8):
    """transformers' logits at every position and its greedy continuation: the mask as
    transformers' processor makes it (rows from the `<|image|>` token on, real tiles)."""
    import torch

    from hearth_mllama.image import preprocess

    vc = loaded.model.vision.config
    picture, tiles = IMAGES[image]
    tiled = preprocess(picture, image_size=vc.image_size, max_num_tiles=vc.max_num_tiles)
    assert tiled.num_tiles == tiles
    ref_ids = [IMAGE_ID if i < 0 else i for i in ids]
    at = ref_ids.index(IMAGE_ID)
    mask = np.zeros((1, len(ids), 1, vc.max_num_tiles), np.int64)
    mask[0, at:, 0, :tiles] = 1
    ratio_mask = [[[1] * tiles + [0] * (vc.max_num_tiles - tiles)]]
    inputs = {
        "input_ids": torch.tensor([ref_ids]),
        "pixel_values": torch.from_numpy(tiled.pixels)[None, None],
        "aspect_ratio_ids": torch.tensor([[tiled.aspect_ratio_id]]),
        "aspect_ratio_mask": torch.tensor(ratio_mask),
        "cross_attention_mask": torch.from_numpy(mask),
    }
    with torch.no_grad():
        logits = model(**inputs).logits[0].numpy()
        out = model.generate(**inputs, max_new_tokens=new, do_sample=False)[0, len(ids) :]
    return logits, out.tolist()


def _run(loaded, text: str, image: str) -> tuple[list[int], np.ndarray, list[int]]:
    """Hearth's (inputs, logits at every position, greedy 8) for the prompt, in batches of
    64 (the engine's num_batch) as the runner splits it."""
    engine = _engine(loaded)
    try:
        ids = _prompt(loaded, engine, text, image)
        out = []
        for start in range(0, len(ids), 64):
            part = np.array(ids[start : start + 64])
            rows = np.arange(start, start + len(part), dtype=np.int32)
            out.append(
                engine.forward(PassInput(part, rows, np.zeros(len(part), np.int32), rows - start))
            )
        logits = np.concatenate(out)
        return ids, logits, greedy(engine, logits[-1], len(ids), 8)
    finally:
        engine.close()


CASES = {
    "wide": (HEADER + "[img-0]the" + ASSISTANT, "wide"),
    "tall": (HEADER + "[img-0]" + ASSISTANT, "tall"),
    "text-around": (HEADER + "is the er on[img-0] the athe" + ASSISTANT, "square"),
    "two-tiles": (HEADER + "on the[img-0] is" + ASSISTANT, "two"),
    "one-tile": (HEADER + "a[img-0]the er" + ASSISTANT, "small"),
    # 100+ inputs before the image: more than one batch of 64
    "long-prefix": (HEADER + " the athe is on er" * 12 + "[img-0] the" + ASSISTANT, "square"),
}


def test_the_image_fills_one_position_with_its_token(loaded):
    engine = _engine(loaded)
    try:
        ids = _prompt(loaded, engine, *CASES["text-around"])
        assert sum(i < 0 for i in ids) == 1
        items = engine.multimodal.recall(next(iter(engine.multimodal._ids)))
        assert items is not None and items[0].positions == 1 and items[0].token == IMAGE_ID
        assert items[0].rows == 4 * 17  # four tiles of (56/14)^2 + 1 states
    finally:
        engine.close()


@pytest.mark.parametrize("case", list(CASES))
def test_logits_and_greedy_match_transformers(tiny, loaded, case):
    model, _ = tiny
    ids, logits, ours = _run(loaded, *CASES[case])
    if case == "long-prefix":
        assert ids.index(min(ids)) > 64  # the image comes in a later batch than the start
    ref_logits, theirs = _reference(model, loaded, ids, CASES[case][1])
    last = float(np.abs(logits[-1] - ref_logits[-1]).max())
    every = float(np.abs(logits - ref_logits).max())
    print(f"{case}: final-position max |diff| {last:.2e}, all positions {every:.2e}; {ours}")
    assert last <= 1e-3 and every <= 1e-3
    assert ours == theirs


def test_unpatched_transformers_differs(tiny, loaded):
    """The comparison above means something: transformers' own handling of the rows before
    the image (their attention output let through) gives other final logits."""
    model, _ = tiny
    text, image = CASES["text-around"]
    engine = _engine(loaded)
    try:
        ids = _prompt(loaded, engine, text, image)
    finally:
        engine.close()
    meta, _ = _reference(model, loaded, ids, image, new=1)
    with transformers_cross_attention(model):
        theirs, _ = _reference(model, loaded, ids, image, new=1)
    diff = float(np.abs(meta[-1] - theirs[-1]).max())
    print(f"Meta vs unpatched transformers, final position: max |diff| {diff:.2e}")
    assert diff > 1e-2


def test_a_follow_up_turn_reuses_the_cross_attention_cache(tiny, loaded, monkeypatch):
    """Turn 2 about the same image: no encoder run (counted), only its new tokens evaluated
    (the cache resumes at turn 1's end), and transformers' logits for the whole prompt."""
    model, _ = tiny
    calls = []
    forward = loaded.model.vision.forward
    monkeypatch.setattr(loaded.model.vision, "forward", lambda *a: calls.append(1) or forward(*a))
    engine = _engine(loaded)
    calls.clear()  # the load-time reservation built the largest image's graph
    try:
        text, image = CASES["wide"]
        first = _prompt(loaded, engine, text, image)
        n = len(first)
        rows = np.arange(n, dtype=np.int32)
        logits = engine.forward(PassInput(np.array(first), rows, np.zeros(n, np.int32), rows[-1:]))
        answer = greedy(engine, logits[-1], n, 4)
        follow = "<|eot_id|>" + HEADER + "the" + ASSISTANT
        again = _prompt(loaded, engine, text, image)  # the image is recalled, not encoded
        assert again == first
        second = again + answer + loaded.tokenizer.encode(follow, add_special=False)
        done = n + len(answer)  # what the cache holds
        new = np.array(second[done:])
        at = np.arange(done, len(second), dtype=np.int32)
        logits = engine.forward(
            PassInput(new, at, np.zeros(len(new), np.int32), np.array([len(new) - 1]))
        )
        ref_logits, _ = _reference(model, loaded, second, image, new=1)
        diff = float(np.abs(logits[-1] - ref_logits[-1]).max())
        print(f"turn 2: {len(new)} new inputs of {len(second)}, max |diff| {diff:.2e}")
        assert len(calls) == 1 and engine.multimodal.encoded == 1
        assert diff <= 1e-3
    finally:
        engine.close()


def test_two_sequences_with_different_images_batch_together(loaded):
    """Two prompts with their own images in one batch, then decoding together: each gets
    what it gets alone (the encoder cache keeps K/V per sequence)."""
    alone = {}
    for case in ("wide", "tall"):
        engine = _engine(loaded)
        try:
            ids = _prompt(loaded, engine, *CASES[case])
            rows = np.arange(len(ids), dtype=np.int32)
            logits = engine.forward(
                PassInput(np.array(ids), rows, np.zeros(len(ids), np.int32), rows[-1:])
            )
            alone[case] = (ids, logits[-1], greedy(engine, logits[-1], len(ids), 6))
        finally:
            engine.close()
    engine = _engine(loaded, parallel=2)
    try:
        ids = {c: _prompt(loaded, engine, *CASES[c]) for c in alone}
        tokens = np.array(ids["wide"] + ids["tall"])
        positions = np.concatenate([np.arange(len(v)) for v in ids.values()])
        seqs = np.repeat([0, 1], [len(v) for v in ids.values()])
        outs = np.array([len(ids["wide"]) - 1, len(tokens) - 1])
        logits = engine.forward(PassInput(tokens, positions, seqs, outs))
        for c, row in zip(alone, logits, strict=True):
            np.testing.assert_allclose(row, alone[c][1], rtol=0, atol=1e-5)
        got = {c: [] for c in alone}
        pos = [len(v) for v in ids.values()]
        for _ in range(6):
            nxt = [int(np.argmax(row)) for row in logits]
            for c, t in zip(alone, nxt, strict=True):
                got[c].append(t)
            logits = engine.forward(
                PassInput(np.array(nxt), np.array(pos), np.array([0, 1]), np.arange(2))
            )
            pos = [p + 1 for p in pos]
        for c in alone:
            assert got[c] == alone[c][2], c
    finally:
        engine.close()
