"""The mllama tests' tiny model as a Hugging Face folder imported through Hearth's converter
(`hearth.convert` with `hearth_mllama.convert`: Ollama's names, keys and repacks), as
`hearth create NAME -f FOLDER` does, so the tests read the files users get."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hearth.convert import convert_checkpoint
from hearth.plugins.registry import default_converters, default_registry
from tests.convert.hf_models import write_bpe_tokenizer

__all__ = ["LLAMA32_VISION_TEMPLATE", "SPECIALS", "convert_tiny", "save_tiny"]

# Llama 3's special tokens and `<|image|>` (the tiny config's image_token_index: vocab - 1)
SPECIALS = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>")
SPECIALS += ("<|eot_id|>", "<|eom_id|>", "<|image|>")
# Llama 3.2 11B Vision Instruct's chat template (its tokenizer_config.json), as Meta ships it.
LLAMA32_VISION_TEMPLATE = (Path(__file__).parent / "llama32_vision_template.jinja").read_text()


def save_tiny(model: Any, folder: Path, chat_template: str | None = None) -> dict[str, int]:
    """Save `model` (a `MllamaForConditionalGeneration` from `tiny_mllama`, before any patch)
    in `folder` as a Hugging Face folder with a byte-level BPE tokenizer whose last ids are
    `SPECIALS` (and `chat_template` in tokenizer_config.json). Returns the specials' ids."""
    vocab = int(model.config.text_config.vocab_size)
    model.save_pretrained(folder)
    ids = write_bpe_tokenizer(folder, vocab - len(SPECIALS), SPECIALS, chat_template)
    if ids["<|image|>"] != model.config.image_token_index:
        raise ValueError("the tokenizer's <|image|> id is not the model's image_token_index")
    return ids


def convert_tiny(model: Any, folder: Path, out: Path) -> Path:
    """Save `model` in `folder` (`save_tiny`) and convert it (F32) to the GGUF file `out`."""
    save_tiny(model, folder)
    convert_checkpoint(
        folder, out, converters=default_converters(), registry=default_registry(), quantize="f32"
    )
    return out
