"""The mllama tests' tiny model as a Hugging Face folder imported through Hearth's converter
(`hearth.convert` with `hearth_mllama.convert`: Ollama's names, keys and repacks), as
`hearth create NAME -f FOLDER` does, so the tests read the files users get."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hearth.convert import convert_checkpoint
from hearth.plugins import default_converters, default_registry
from tests.convert.hf_models import write_bpe_tokenizer

__all__ = ["SPECIALS", "convert_tiny"]

# Llama 3's special tokens and `<|image|>` (the tiny config's image_token_index: vocab - 1)
SPECIALS = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>")
SPECIALS += ("<|eot_id|>", "<|eom_id|>", "<|image|>")


def convert_tiny(model: Any, folder: Path, out: Path) -> Path:
    """Save `model` (a `MllamaForConditionalGeneration` from `tiny_mllama`, before any patch)
    in `folder` with a byte-level BPE tokenizer whose last ids are `SPECIALS`, and convert
    it (F32) to the GGUF file `out`."""
    vocab = int(model.config.text_config.vocab_size)
    model.save_pretrained(folder)
    ids = write_bpe_tokenizer(folder, vocab - len(SPECIALS), SPECIALS)
    if ids["<|image|>"] != model.config.image_token_index:
        raise ValueError("the tokenizer's <|image|> id is not the model's image_token_index")
    convert_checkpoint(
        folder, out, converters=default_converters(), registry=default_registry(), quantize="f32"
    )
    return out
