"""A tiny random Gemma 3 with its vision tower, as Hugging Face and GGUF files, for tests.

    files = build_tiny_gemma3_vision(tmp_path / "gemma3v")   # reused when already built
    load_model(files.text, registry=..., projector=files.mmproj)   # llama.cpp's two files
    load_model(files.ollama, registry=...)                         # Ollama's one file
    model, processor = reference(files)                            # transformers' objects

What is built, in `folder`:

* `hf/`: a `Gemma3ForConditionalGeneration` with random F32 weights (fixed seed) and sizes
  from `TinyGemma3Vision`, saved as Google's checkpoints are (`vision_tower.vision_model.*`,
  `multi_modal_projector.*`, `language_model.*`), with a tokenizer built here: a small
  SentencePiece model trained on a short text (`tokenizer.model`), Gemma's special tokens at
  Gemma's ids relative to the config (`<pad> <eos> <bos> <unk>` 0-3, then `<mask>`,
  `<start_of_turn>`, `<end_of_turn>`, `<start_of_image>` = `boi_token_index`,
  `<end_of_image>` = `eoi_token_index`; newline runs as user-defined pieces; and
  `<image_soft_token>` = `image_token_index`, the first id after the SentencePiece vocabulary,
  as in Gemma), `tokenizer_config.json` with `added_tokens_decoder` marking them special,
  Gemma 3's chat template, and the processor settings (`image_seq_length`, mean and std).
* `text.gguf` and `mmproj.gguf`: converted by llama.cpp's own `convert_hf_to_gguf.py` (the
  one in llama-cpp-python's source distribution, `LLAMACPP_VERSION`, fetched once with pip and
  kept under the environment's prefix: `llamacpp_converter()`), `--outtype f32`; the
  converter stores the projector's input projection as F16 whatever the type, so that
  weight is rounded to F16 values in the checkpoint too (the files then hold exactly the
  checkpoint's numbers).
* `ollama.gguf`: the same model as one file in Ollama's layout (`write_ollama_gemma3`):
  the text file's tensors and keys plus the encoder's tensors under Ollama's names and
  `gemma3.vision.*` keys.

Settings chosen so that llama.cpp's conventions and transformers' agree: six text layers,
five sliding and one global (llama.cpp assumes that pattern for gemma3, its converter writes
none), and `query_pre_attn_scalar` = `head_dim` (llama.cpp scales attention by
1/sqrt(head_dim)). The tower is 64x64 pixels in 8x8 patches pooled 2x2 into 16 image tokens.

Importing this module is cheap: torch, transformers and sentencepiece are imported by the
functions that need them (they are test dependencies of Hearth, not runtime ones).
"""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hearth.plugins.testing import (
    LLAMACPP_VERSION,
    llamacpp_converter,
    run_llamacpp_converter,
)

__all__ = [
    "Gemma3VisionFiles",
    "TinyGemma3Vision",
    "build_tiny_gemma3_vision",
    "reference",
    "reference_image_features",
    "reference_pixel_values",
    "write_ollama_gemma3",
]


_CONTROL = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<mask>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
)
_NEWLINES = ("\n", "\n\n", "\n\n\n")  # user-defined pieces, as Gemma's whitespace runs
_IMAGE_TOKEN = "<image_soft_token>"

_TRAINING_TEXT = """The quick brown fox jumps over the lazy dog. A picture is worth many words.
What is in this image? Describe the colours, the shapes and the light in the picture.
Hello world! 0123456789 images, pixels, vision, towers, patches and tokens.
The model looks at the photo and writes what it sees: a cat, a red car, two trees.
"""

# Gemma 3's chat template (images as <start_of_image>, which the processor expands).
CHAT_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- else -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""


@dataclass(frozen=True)
class TinyGemma3Vision:
    """Sizes and seed of the tiny model (see the module docstring)."""

    spm_vocab: int = 400  # SentencePiece pieces; <image_soft_token> is the next id
    text_embd: int = 64
    text_ffn: int = 128
    text_layers: int = 6
    text_heads: int = 2
    text_kv_heads: int = 1
    head_dim: int = 32
    sliding_window: int = 16
    context_length: int = 512
    vision_embd: int = 48
    vision_ffn: int = 96
    vision_layers: int = 2
    vision_heads: int = 3
    image_size: int = 64
    patch_size: int = 8
    tokens_per_image: int = 16
    seed: int = 0

    @property
    def ids(self) -> dict[str, int]:
        """Token text -> id of the special tokens."""
        ids = {t: i for i, t in enumerate(_CONTROL)}
        ids.update({t: len(_CONTROL) + i for i, t in enumerate(_NEWLINES)})
        ids[_IMAGE_TOKEN] = self.spm_vocab
        return ids


@dataclass(frozen=True)
class Gemma3VisionFiles:
    spec: TinyGemma3Vision
    hf_dir: Path
    text: Path  # llama.cpp's text model
    mmproj: Path  # llama.cpp's projector (architecture clip)
    ollama: Path  # Ollama's single file

    @property
    def boi(self) -> int:
        return self.spec.ids["<start_of_image>"]

    @property
    def eoi(self) -> int:
        return self.spec.ids["<end_of_image>"]

    @property
    def image_token(self) -> int:
        return self.spec.ids[_IMAGE_TOKEN]


# -- the checkpoint -------------------------------------------------------------------------


def build_tiny_gemma3_vision(
    folder: Path, spec: TinyGemma3Vision | None = None, converter: Path | None = None
) -> Gemma3VisionFiles:
    """Build (or reuse, when `folder` holds a complete build of the same spec) the files the
    module docstring lists. Raises ConverterUnavailableError when llama.cpp's converter
    cannot be fetched."""
    spec = spec or TinyGemma3Vision()
    folder = Path(folder)
    files = Gemma3VisionFiles(
        spec,
        folder / "hf",
        folder / "text.gguf",
        folder / "mmproj.gguf",
        folder / "ollama.gguf",
    )
    done = folder / "built.json"
    stamp = json.dumps({"spec": asdict(spec), "converter": LLAMACPP_VERSION}, sort_keys=True)
    if done.is_file() and done.read_text() == stamp:
        return files
    convert = llamacpp_converter(converter)
    shutil.rmtree(folder, ignore_errors=True)
    files.hf_dir.mkdir(parents=True)
    _write_tokenizer(files.hf_dir, spec)
    _write_checkpoint(files.hf_dir, spec)
    run_llamacpp_converter(convert, files.hf_dir, files.text, mmproj=False)
    run_llamacpp_converter(convert, files.hf_dir, files.mmproj, mmproj=True)
    write_ollama_gemma3(files.text, files.mmproj, files.ollama, spec.tokens_per_image)
    done.write_text(stamp)
    return files


def _train_spm(spec: TinyGemma3Vision) -> bytes:
    import sentencepiece as spm

    buf = io.BytesIO()
    lines = [s for s in _TRAINING_TEXT.replace("\n", " ").split(". ") if s] * 20
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        vocab_size=spec.spm_vocab,
        model_type="bpe",
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        pad_piece="<pad>",
        eos_piece="<eos>",
        bos_piece="<bos>",
        unk_piece="<unk>",
        user_defined_symbols=list(_CONTROL[4:]) + list(_NEWLINES),
        byte_fallback=True,
        normalization_rule_name="identity",
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    return buf.getvalue()


def _write_tokenizer(hf_dir: Path, spec: TinyGemma3Vision) -> None:
    import sentencepiece as spm
    from tokenizers import AddedToken
    from transformers import Gemma3Processor, GemmaTokenizer
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
    from transformers.tokenization_utils_base import generate_merges

    model = _train_spm(spec)
    (hf_dir / "tokenizer.model").write_bytes(model)
    sp = spm.SentencePieceProcessor(model_proto=model)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    if sp.get_piece_size() != spec.spm_vocab or any(
        pieces[i] != t for t, i in spec.ids.items() if i < spec.spm_vocab
    ):
        raise RuntimeError("the SentencePiece model's special pieces are not where Gemma has them")
    # transformers would convert tokenizer.model with protobuf; build the same tokenizer
    # (Gemma's: byte-fallback BPE, merges from the piece scores) from the pieces instead.
    vocab = {p: i for i, p in enumerate(pieces)}
    scores = {p: sp.get_score(i) for i, p in enumerate(pieces)}
    merges = generate_merges(vocab, scores, skip_tokens=[*_CONTROL, *_NEWLINES])
    tok = GemmaTokenizer(
        vocab=vocab,
        merges=merges,
        add_bos_token=True,
        extra_special_tokens={
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": _IMAGE_TOKEN,
        },
    )
    special = [AddedToken(t, special=True, normalized=False) for t in (*_CONTROL, _IMAGE_TOKEN)]
    tok.add_tokens(special, special_tokens=True)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in _NEWLINES])
    if tok.convert_tokens_to_ids(_IMAGE_TOKEN) != spec.spm_vocab:
        raise RuntimeError("<image_soft_token> did not get the id after the vocabulary")
    size = {"height": spec.image_size, "width": spec.image_size}
    images = Gemma3ImageProcessorPil(size=size, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    processor = Gemma3Processor(
        image_processor=images,
        tokenizer=tok,
        image_seq_length=spec.tokens_per_image,
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(hf_dir)
    # llama.cpp's converter reads tokenizer.model and marks the tokens that
    # tokenizer_config.json's added_tokens_decoder calls special as control tokens.
    config_path = hf_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())

    def entry(text: str, special: bool) -> dict[str, Any]:
        return {
            "content": text,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }

    decoder = {str(i): entry(t, t not in _NEWLINES) for t, i in sorted(spec.ids.items(), key=_id)}
    config.update(
        added_tokens_decoder=decoder,
        add_bos_token=True,
        add_eos_token=False,
        chat_template=CHAT_TEMPLATE,
    )
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False))


def _id(item: tuple[str, int]) -> int:
    return item[1]


def _write_checkpoint(hf_dir: Path, spec: TinyGemma3Vision) -> None:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    ids = spec.ids
    text = {
        "vocab_size": spec.spm_vocab + 1,
        "hidden_size": spec.text_embd,
        "intermediate_size": spec.text_ffn,
        "num_hidden_layers": spec.text_layers,
        "num_attention_heads": spec.text_heads,
        "num_key_value_heads": spec.text_kv_heads,
        "head_dim": spec.head_dim,
        "query_pre_attn_scalar": spec.head_dim,  # llama.cpp scales by 1/sqrt(head_dim)
        "sliding_window": spec.sliding_window,
        "max_position_embeddings": spec.context_length,
        "rms_norm_eps": 1e-6,
        "pad_token_id": ids["<pad>"],
        "eos_token_id": ids["<eos>"],
        "bos_token_id": ids["<bos>"],
    }
    vision = {
        "hidden_size": spec.vision_embd,
        "intermediate_size": spec.vision_ffn,
        "num_hidden_layers": spec.vision_layers,
        "num_attention_heads": spec.vision_heads,
        "image_size": spec.image_size,
        "patch_size": spec.patch_size,
        "layer_norm_eps": 1e-6,
        "vision_use_head": False,
    }
    config = Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=spec.tokens_per_image,
        boi_token_index=ids["<start_of_image>"],
        eoi_token_index=ids["<end_of_image>"],
        image_token_index=ids[_IMAGE_TOKEN],
    )
    torch.manual_seed(spec.seed)
    model: Any = Gemma3ForConditionalGeneration(config)
    model.eval()
    gen = torch.Generator().manual_seed(spec.seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:  # norms and biases; LayerNorm weights around 1, RMSNorm's (1+w) 0
                layer_norm = "vision_tower" in name and "norm" in name and name.endswith("weight")
                p.copy_(float(layer_norm) + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[0] if name.endswith("mm_input_projection_weight") else p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) / fan_in**0.5)
            if name.endswith("mm_input_projection_weight"):
                p.copy_(p.half().float())  # llama.cpp's converter stores it as F16
    model.save_pretrained(hf_dir)
    # Google's checkpoints (and llama.cpp's converter) name the tower vision_model inside
    # vision_tower; transformers 5 saves it without, and loads either.
    path = hf_dir / "model.safetensors"
    state = load_file(str(path))
    renamed = {
        (
            k.replace("vision_tower.", "vision_tower.vision_model.", 1)
            if k.startswith("vision_tower.")
            else k
        ): v
        for k, v in state.items()
    }
    save_file(renamed, str(path), metadata={"format": "pt"})


# -- Ollama's single file -------------------------------------------------------------------

_OLLAMA_TENSORS = {  # llama.cpp's projector name -> Ollama's
    "v.patch_embd": "v.patch_embedding",
    "v.position_embd": "v.position_embedding",
    "v.post_ln": "v.post_layernorm",
    "mm.input_projection": "mm.mm_input_projection",
    "mm.soft_emb_norm": "mm.mm_soft_emb_norm",
}
_OLLAMA_LAYER = {  # within v.blk.N.
    "ln1": "layer_norm1",
    "ln2": "layer_norm2",
    "attn_out": "attn_output",
    "ffn_up": "mlp.fc1",
    "ffn_down": "mlp.fc2",
}
_OLLAMA_KEYS = {  # clip.vision.* -> gemma3.vision.*
    "image_size": "image_size",
    "patch_size": "patch_size",
    "embedding_length": "embedding_length",
    "feed_forward_length": "feed_forward_length",
    "block_count": "block_count",
    "attention.head_count": "attention.head_count",
    "attention.layer_norm_epsilon": "attention.layer_norm_epsilon",
}


def ollama_tensor_name(name: str) -> str:
    """A llama.cpp projector tensor's name as Ollama's converter writes it."""
    stem, _, suffix = name.rpartition(".")
    if stem in _OLLAMA_TENSORS:
        return f"{_OLLAMA_TENSORS[stem]}.{suffix}"
    parts = stem.split(".")
    if len(parts) == 4 and parts[:2] == ["v", "blk"]:
        return f"v.blk.{parts[2]}.{_OLLAMA_LAYER.get(parts[3], parts[3])}.{suffix}"
    return name


def write_ollama_gemma3(text: Path, mmproj: Path, out: Path, tokens_per_image: int) -> Path:
    """One GGUF in Ollama's gemma3 layout from llama.cpp's two: the text file's keys and
    tensors, the projector's tensors renamed (`ollama_tensor_name`), `gemma3.vision.*` keys
    and `gemma3.mm.tokens_per_image`."""
    import gguf

    text_r, proj_r = gguf.GGUFReader(text), gguf.GGUFReader(mmproj)
    w = gguf.GGUFWriter(str(out), "gemma3")
    for name, field in text_r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = field.types[1] if len(field.types) > 1 else None
        w.add_key_value(name, field.contents(), field.types[0], sub)
    for key, ours in _OLLAMA_KEYS.items():
        field = proj_r.fields[f"clip.vision.{key}"]
        w.add_key_value(f"gemma3.vision.{ours}", field.contents(), field.types[0])
    w.add_uint32("gemma3.vision.num_channels", 3)
    w.add_uint32("gemma3.mm.tokens_per_image", tokens_per_image)
    for reader, rename in ((text_r, False), (proj_r, True)):
        for t in reader.tensors:
            name = ollama_tensor_name(t.name) if rename else t.name
            w.add_tensor(name, np.asarray(t.data))  # F32 and F16 only: their numpy type says it
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


# -- the reference (transformers) -----------------------------------------------------------


def reference(files: Gemma3VisionFiles) -> tuple[Any, Any]:
    """(model, processor): transformers' Gemma3ForConditionalGeneration (F32, eval) and
    AutoProcessor, loaded from `files.hf_dir`."""
    import torch
    import transformers

    hf: Any = transformers  # untyped calls
    model = hf.Gemma3ForConditionalGeneration.from_pretrained(files.hf_dir, dtype=torch.float32)
    return model.eval(), hf.AutoProcessor.from_pretrained(files.hf_dir)


def reference_pixel_values(processor: Any, data: bytes) -> np.ndarray:
    """transformers' pixel values `[3, S, S]` of the image in `data` (decoded by Pillow)."""
    from PIL import Image

    out = processor.image_processor(images=[Image.open(io.BytesIO(data))], return_tensors="np")
    return np.asarray(out["pixel_values"][0], dtype=np.float32)


def reference_image_features(model: Any, processor: Any, data: bytes) -> np.ndarray:
    """transformers' `get_image_features(...).pooler_output` of one image: `[tokens, embd]`."""
    import torch

    pixels = torch.from_numpy(reference_pixel_values(processor, data))[None]
    with torch.no_grad():
        out = model.get_image_features(pixel_values=pixels)
    return np.asarray(out.pooler_output[0].float().numpy(), dtype=np.float32)
