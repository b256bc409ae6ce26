"""A tiny random Qwen2-VL (a vision model whose text side uses M-RoPE), built with transformers
and converted by llama.cpp's own converter (`convert_hf_to_gguf.py` from llama-cpp-python's
sdist, as `hearth.plugins.testing.llamacpp_convert` fetches it) into a text GGUF (architecture
`qwen2vl`) and an mmproj GGUF (projector type `qwen2vl`), both F32 (`--outtype f32`).

    text, mmproj = build_tiny_qwen2vl(tmp_path / "qwen2vl")   # reused when already built
    png = sample_png("gradient")                               # 112x112 test pictures

What is built, in `folder`:

* `hf/`: a `Qwen2VLForConditionalGeneration` (Qwen2-VL, not 2.5: its tower has no window
  attention and no `fullatt_block_indexes`, so any depth converts) with random weights
  (fixed seed), a SentencePiece tokenizer (`tokenizer.model`, as `convert.chat_models`'s) whose
  user-defined pieces are ChatML's markers and Qwen2-VL's vision tokens (single tokens, ids
  in `config.json`: `vision_start_token_id`, `vision_end_token_id`, `image_token_id`,
  `video_token_id`), `tokenizer_config.json` with a ChatML template that writes an image as
  Qwen2-VL's does, and `preprocessor_config.json` (the converter takes the mean and std).
* `text.gguf` and `mmproj.gguf`: the converter's two files.

Sizes: the text model is `convert.chat_models`' qwen2 (2 layers, 64 wide, 4 heads and 2 KV
heads of 16, q/k/v biases) with M-RoPE sections [2, 3, 3] (temporal, height, width: 8 = head_dim / 2
rotary pairs, Qwen2-VL's 16:24:24 scaled down). The tower: 3 blocks (the fewest the converter
takes: it maps the merger's `mlp.2` through its block-numbered names), 32 wide, 2 heads of 16
(libmtmd's vision M-RoPE takes head_dim / 4 per section), MLP 64, 14-pixel patches taken two
frames at a time (`temporal_patch_size` 2, the only one the converter accepts), merged 2x2
into one 64-wide embedding (the text width). libmtmd resizes an image to multiples of 28
pixels keeping between 8 and 4096 merged tokens (its fixed limits for Qwen2-VL: the
converter writes no min/max pixels, so `preprocessor_config.json` states the same limits for
transformers); a 112x112 image is 4x4 = 16 embeddings, which take max(4, 4) = 4 M-RoPE
positions (56x56 is scaled up to 84x84: 9 embeddings, 3 positions). libmtmd writes
`<|vision_start|>` before an image's embeddings and `<|vision_end|>` after them. llama.cpp's
image embeddings match transformers' to about 2e-3 (its merger's GELU is the tanh form).

Importing this module is cheap: torch, transformers, sentencepiece and pillow are imported by
the functions that need them.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from convert.chat_models import tokenizer_config
from convert.hf_models import randomize, train_spm

__all__ = ["IMAGE_SIZE", "SPECIALS", "build_tiny_qwen2vl", "sample_png"]

SPM_VOCAB = 400
VOCAB = 404  # padded past the SentencePiece pieces, as real checkpoints are
PATCH = 14
MERGE = 2
IMAGE_SIZE = 112  # sample_png's default: (112 / 28)^2 = 16 embeddings, 4 positions
MIN_TOKENS, MAX_TOKENS = 8, 4096  # libmtmd's limits for Qwen2-VL (merged tokens per image)

SPECIALS = (
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# ChatML, with an image as Qwen2-VL's template writes it (its processor expands <|image_pad|>).
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# CLIP's mean and std, as Qwen2-VL's preprocessor_config.json has them.
IMAGE_MEAN = [0.48145466, 0.4578275, 0.40821073]
IMAGE_STD = [0.26862954, 0.26130258, 0.27577711]


def build_tiny_qwen2vl(folder: Path, seed: int = 5) -> tuple[Path, Path]:
    """Build (or reuse, when `folder` holds a complete build of the same seed) the files the
    module docstring lists; returns (text GGUF, mmproj GGUF). Raises
    hearth.plugins.testing.ConverterUnavailableError when llama.cpp's converter
    cannot be fetched."""
    from hearth.plugins.testing import LLAMACPP_VERSION, llamacpp_converter, run_llamacpp_converter

    folder = Path(folder)
    text, mmproj, done = folder / "text.gguf", folder / "mmproj.gguf", folder / "built.json"
    stamp = json.dumps({"seed": seed, "converter": LLAMACPP_VERSION}, sort_keys=True)
    if done.is_file() and done.read_text() == stamp and text.is_file() and mmproj.is_file():
        return text, mmproj
    converter = llamacpp_converter()
    done.unlink(missing_ok=True)
    hf = _write_checkpoint(folder / "hf", seed)
    run_llamacpp_converter(converter, hf, text, mmproj=False)
    run_llamacpp_converter(converter, hf, mmproj, mmproj=True)
    done.write_text(stamp)
    return text, mmproj


def _write_checkpoint(hf: Path, seed: int) -> Path:
    import sentencepiece as spm
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    hf.mkdir(parents=True, exist_ok=True)
    model_bytes = train_spm(SPM_VOCAB, user_defined=SPECIALS)
    (hf / "tokenizer.model").write_bytes(model_bytes)
    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    ids = {t: sp.piece_to_id(t) for t in SPECIALS}
    if len(set(ids.values())) != len(SPECIALS) or sp.unk_id() in ids.values():
        raise RuntimeError(f"the SentencePiece model lacks some special pieces: {ids}")
    (hf / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(CHAT_TEMPLATE, ids)))
    area = (PATCH * MERGE) ** 2
    (hf / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "image_processor_type": "Qwen2VLImageProcessor",
                "do_resize": True,
                "do_rescale": True,
                "do_normalize": True,
                "do_convert_rgb": True,
                "image_mean": IMAGE_MEAN,
                "image_std": IMAGE_STD,
                "patch_size": PATCH,
                "merge_size": MERGE,
                "temporal_patch_size": 2,
                "min_pixels": MIN_TOKENS * area,
                "max_pixels": MAX_TOKENS * area,
                "size": {"shortest_edge": MIN_TOKENS * area, "longest_edge": MAX_TOKENS * area},
            },
            indent=2,
        )
    )
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": VOCAB,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 1024,
            "rms_norm_eps": 1e-6,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 3, 3],
            },
            "bos_token_id": sp.bos_id(),
            "eos_token_id": ids["<|im_end|>"],
        },
        vision_config={
            "depth": 3,  # the converter maps merger.mlp.{i} for i < depth: mlp.2 needs 3
            "embed_dim": 32,
            "hidden_size": 64,  # the merger's output: the text width
            "mlp_ratio": 2,
            "num_heads": 2,
            "in_channels": 3,
            "patch_size": PATCH,
            "spatial_merge_size": MERGE,
            "temporal_patch_size": 2,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config).eval()
    randomize(model, seed + 1)
    model.save_pretrained(hf)
    return hf


def sample_png(kind: str, size: int = IMAGE_SIZE) -> bytes:
    """A deterministic `size` x `size` RGB test picture as PNG bytes. Kinds: "gradient" (red
    across, green down, blue diagonal), "checker" (black and white squares of size / 8),
    "stripes" (saturated red, green and blue vertical bands), "noise" (seeded uniform noise)."""
    import numpy as np
    from PIL import Image

    y, x = np.mgrid[0:size, 0:size]
    scale = 255 / max(size - 1, 1)
    if kind == "gradient":
        pixels = np.stack([x * scale, y * scale, (x + y) * scale / 2], -1)
    elif kind == "checker":
        cell = max(size // 8, 1)
        on = ((x // cell + y // cell) % 2) * 255
        pixels = np.stack([on, on, on], -1)
    elif kind == "stripes":
        band = (x * 3 // size).clip(0, 2)
        pixels = np.stack([(band == c) * 255 for c in range(3)], -1)
    elif kind == "noise":
        pixels = np.random.default_rng(0).integers(0, 256, (size, size, 3))
    else:
        raise ValueError(f"unknown picture kind {kind!r}")
    buf = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8), "RGB").save(buf, format="PNG")
    return buf.getvalue()
