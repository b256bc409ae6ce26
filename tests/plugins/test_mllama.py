"""Llama 3.2 Vision (mllama): the text model with cross-attention against transformers.

A tiny random `MllamaForConditionalGeneration` (F32, `hearth.plugins.testing.mllama_vision`:
image 56 in 14-pixel patches, 4 tiles, two cross-attention layers, every gate random) is
written as Ollama's converter writes it: `mllama.*` keys, the vision tensors as that module
writes them, the text tensors under Ollama's names with its Llama q/k row permutation (which
its converter also applies to `cross_attn_q_proj`/`k_proj`) and the cross-attention gates raw
(Ollama's engine takes their tanh); plus a byte-level BPE vocabulary built here with Llama 3's
special tokens and `<|image|>`.

The reference is transformers with its vision encoder patched to Meta's semantics for the
intermediate layers (each selected layer's INPUT; transformers >= 4.54 collects layer
outputs, which the released weights were not trained with).

Rows before the image: transformers zeroes their cross-attention mask row (so they attend to
every key of the image, its padding tiles too) and masks only their feed-forward output;
Meta's reference also masks their attention output. Hearth follows transformers (the parity
oracle here); the images below fill all four tiles, as the encoder hands Hearth the real
tiles only (transformers' rows before an image would also see the states of padding tiles).
"""

from __future__ import annotations

import io

import gguf
import numpy as np
import pytest
from PIL import Image

from hearth.engine.forward import ForwardEngine
from hearth.engine.ml.api import DType
from hearth.engine.model import load_model
from hearth.plugins import default_registry
from hearth.plugins.testing.mllama_vision import (
    TinyMllamaVision,
    meta_semantics,
    tiny_mllama,
    vision_keys,
    vision_tensors,
)
from hearth.plugins.testing.parity import greedy

pytestmark = pytest.mark.slow

SPEC = TinyMllamaVision(vocab=300, text_layers=5, cross_attention_layers=(1, 3))
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>"]
SPECIALS += ["<|eot_id|>", "<|eom_id|>"]
IMAGE_ID = SPEC.vocab - 1  # the tiny config's image_token_index
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "s"), ("Ġ", "a"), ("o", "n"), ("e", "r")]


def _bytes_to_unicode() -> list[str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


def _vocab() -> tuple[list[str], list[int]]:
    tokens = _bytes_to_unicode() + [a + b for a, b in MERGES]
    while len(tokens) < SPEC.vocab - 1 - len(SPECIALS):
        tokens.append(f"<|reserved_{len(tokens)}|>")
    types = [1] * len(tokens)
    types[256 + len(MERGES) :] = [4] * (len(tokens) - 256 - len(MERGES))
    tokens += [*SPECIALS, "<|image|>"]
    types += [3] * (len(SPECIALS) + 1)
    assert len(tokens) == SPEC.vocab and tokens[IMAGE_ID] == "<|image|>"
    return tokens, types


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """Ollama's (llama.cpp's) q/k row permutation: halves of each head become pairs."""
    return (
        w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


_TEXT_NAMES = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "cross_attn.": "cross_attn_",
}


def _text_tensors(model) -> dict[str, np.ndarray]:
    lm = model.model.language_model
    cfg = lm.config
    out = {"output.weight": model.lm_head.weight.detach().numpy()}
    for name, p in lm.state_dict().items():
        value = p.detach().float().numpy()
        if name == "embed_tokens.weight":
            out["token_embd.weight"] = value
            continue
        if name == "norm.weight":
            out["output_norm.weight"] = value
            continue
        new = name.replace("layers.", "blk.")
        for old, ours in _TEXT_NAMES.items():
            new = new.replace(old, ours)
        if new.endswith(("attn_q.weight", "attn_q_proj.weight")):
            value = _permute(value, cfg.num_attention_heads)
        elif new.endswith(("attn_k.weight", "attn_k_proj.weight")):
            value = _permute(value, cfg.num_key_value_heads)
        out[new] = value
    return out


def _write(path, model) -> None:
    cfg = model.config.text_config
    w = gguf.GGUFWriter(str(path), "mllama")
    w.add_uint32("mllama.block_count", cfg.num_hidden_layers)
    w.add_uint32("mllama.context_length", 512)
    w.add_uint32("mllama.embedding_length", cfg.hidden_size)
    w.add_uint32("mllama.feed_forward_length", cfg.intermediate_size)
    w.add_uint32("mllama.attention.head_count", cfg.num_attention_heads)
    w.add_uint32("mllama.attention.head_count_kv", cfg.num_key_value_heads)
    w.add_uint32("mllama.rope.dimension_count", cfg.hidden_size // cfg.num_attention_heads)
    w.add_float32("mllama.rope.freq_base", float(cfg.rope_parameters["rope_theta"]))
    w.add_float32("mllama.attention.layer_norm_rms_epsilon", float(cfg.rms_norm_eps))
    w.add_array("mllama.attention.cross_attention_layers", list(cfg.cross_attention_layers))
    for key, value in vision_keys(model.config.vision_config).items():
        full = f"mllama.vision.{key}"
        if isinstance(value, list):
            w.add_array(full, value)
        elif isinstance(value, float):
            w.add_float32(full, value)
        else:
            w.add_uint32(full, int(value))
    tokens, types = _vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in MERGES])
    w.add_bos_token_id(tokens.index("<|begin_of_text|>"))
    w.add_eos_token_id(tokens.index("<|eot_id|>"))
    w.add_add_bos_token(True)
    tensors = {
        **_text_tensors(model),
        **vision_tensors(model.model.vision_model, model.model.multi_modal_projector, SPEC.heads),
    }
    for name, value in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(value, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _picture(width: int, height: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


# Every picture fills the four tiles (see the module docstring): 1x4, 4x1 and 2x2.
IMAGES = {
    "wide": _picture(224, 50, 1),
    "tall": _picture(40, 200, 2),
    "square": _picture(100, 96, 3),
}
HEADER = "<|start_header_id|>user<|end_header_id|>\n\n"
ASSISTANT = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model = tiny_mllama(SPEC)
    meta_semantics(model.model.vision_model)
    model.generation_config.eos_token_id = None  # eight tokens, as Hearth's greedy takes them
    model.generation_config.pad_token_id = 0
    path = tmp_path_factory.mktemp("mllama") / "tiny-mllama.gguf"
    _write(path, model)
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
        [IMAGES[image]],
        loaded.model,
        engine,
        lambda t, special: loaded.tokenizer.encode(t, add_special=special),
    )
    assert marks[0] == ids.index(min(ids))  # the start through the image share one batch
    return ids


def _reference(model, loaded, ids: list[int], image: str, new: int = 8):
    """transformers' logits at every position and its greedy continuation."""
    import torch

    from hearth_mllama.image import preprocess

    vc = loaded.model.vision.config
    tiled = preprocess(IMAGES[image], image_size=vc.image_size, max_num_tiles=vc.max_num_tiles)
    assert tiled.num_tiles == vc.max_num_tiles
    ref_ids = [IMAGE_ID if i < 0 else i for i in ids]
    at = ref_ids.index(IMAGE_ID)
    mask = np.zeros((1, len(ids), 1, vc.max_num_tiles), np.int64)
    mask[0, at:, 0, : tiled.num_tiles] = 1
    inputs = {
        "input_ids": torch.tensor([ref_ids]),
        "pixel_values": torch.from_numpy(tiled.pixels)[None, None],
        "aspect_ratio_ids": torch.tensor([[tiled.aspect_ratio_id]]),
        "aspect_ratio_mask": torch.tensor([[[1] * tiled.num_tiles + [0] * (4 - tiled.num_tiles)]]),
        "cross_attention_mask": torch.from_numpy(mask),
    }
    with torch.no_grad():
        logits = model(**inputs).logits[0].numpy()
        out = model.generate(**inputs, max_new_tokens=new, do_sample=False)[0, len(ids) :]
    return logits, out.tolist()


CASES = {
    "wide": (HEADER + "[img-0]the" + ASSISTANT, "wide"),
    "tall": (HEADER + "[img-0]" + ASSISTANT, "tall"),
    "text-around": (HEADER + "is the er on[img-0] the athe" + ASSISTANT, "square"),
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
    engine = _engine(loaded)
    try:
        ids = _prompt(loaded, engine, *CASES[case])
        n = len(ids)
        rows = np.arange(n, dtype=np.int32)
        logits = engine.forward(np.array(ids), rows, np.zeros(n, np.int32), rows)
        ours = greedy(engine, logits[-1], n, 8)
        ref_logits, theirs = _reference(model, loaded, ids, CASES[case][1])
        last = float(np.abs(logits[-1] - ref_logits[-1]).max())
        every = float(np.abs(logits - ref_logits).max())
        print(f"{case}: final-position max |diff| {last:.2e}, all positions {every:.2e}; {ours}")
        assert last <= 1e-3 and every <= 1e-3
        assert ours == theirs
    finally:
        engine.close()


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
        logits = engine.forward(np.array(first), rows, np.zeros(n, np.int32), rows[-1:])
        answer = greedy(engine, logits[-1], n, 4)
        follow = "<|eot_id|>" + HEADER + "the" + ASSISTANT
        second = _prompt(loaded, engine, text + "".join(
            loaded.tokenizer.decode([t]) for t in answer) + follow, image)  # fmt: skip
        done = n + len(answer)  # what the cache holds
        assert second[:done] == first + answer
        new = np.array(second[done:])
        at = np.arange(done, len(second), dtype=np.int32)
        logits = engine.forward(new, at, np.zeros(len(new), np.int32), np.array([len(new) - 1]))
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
            logits = engine.forward(np.array(ids), rows, np.zeros(len(ids), np.int32), rows[-1:])
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
        logits = engine.forward(tokens, positions, seqs, outs)
        for c, row in zip(alone, logits, strict=True):
            np.testing.assert_allclose(row, alone[c][1], rtol=0, atol=1e-5)
        got = {c: [] for c in alone}
        pos = [len(v) for v in ids.values()]
        for _ in range(6):
            nxt = [int(np.argmax(row)) for row in logits]
            for c, t in zip(alone, nxt, strict=True):
                got[c].append(t)
            logits = engine.forward(np.array(nxt), np.array(pos), np.array([0, 1]), np.arange(2))
            pos = [p + 1 for p in pos]
        for c in alone:
            assert got[c] == alone[c][2], c
    finally:
        engine.close()
