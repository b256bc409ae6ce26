"""A checkpoint's tokenizer as `tokenizer.ggml.*` keys, the way llama.cpp's
`convert_hf_to_gguf.py` writes them (Hearth's tokenizer reads those keys):

* `tokenizer.model` (SentencePiece, preferred when present, as llama.cpp does for Llama and
  Gemma): model `llama`, pre `default`, the pieces with their scores and types
  (user-defined pieces count as normal ones), then `added_tokens.json` and
  `tokenizer_config.json`'s `added_tokens_decoder` (special -> control, else user-defined,
  score -1000), ids up to the config's vocabulary size as `[PADn]` (unused, -10000).
* `tokenizer.json` with a byte-level BPE model: model `gpt2`, the pre-tokenizer's name
  recognised from its regex, tokens by id (added ones: special -> control, else
  user-defined; missing ids `[PADn]`, unused), merges.
* Special token ids, add_bos/add_eos and the chat template: gguf's `SpecialVocab` (the code
  llama.cpp's converter uses), from tokenizer_config.json, tokenizer.json and config.json.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf

from .spm_model import CONTROL, UNUSED, USER_DEFINED, read_pieces

__all__ = ["TokenizerData", "read_tokenizer"]

NORMAL = 1

_LLAMA3_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_PRE_BY_REGEX = {_LLAMA3_RE: "llama-bpe", _QWEN2_RE: "qwen2"}

log = logging.getLogger(__name__)


@dataclass
class TokenizerData:
    """What goes into the file: `model` ("llama" or "gpt2"), `pre`, tokens, scores (SPM
    only), types, and the special vocabulary (merges, ids, flags, template)."""

    model: str
    pre: str
    tokens: list[str]
    scores: list[float] | None
    types: list[int]
    special: gguf.SpecialVocab

    def write(self, writer: gguf.GGUFWriter) -> None:
        writer.add_tokenizer_model(self.model)
        writer.add_tokenizer_pre(self.pre)
        writer.add_token_list(self.tokens)
        if self.scores is not None:
            writer.add_token_scores(self.scores)
        writer.add_token_types(self.types)
        self.special.add_to_gguf(writer, quiet=True)


def looks_special(text: str) -> bool:
    """llama.cpp's `does_token_look_special`: added tokens that are control tokens even
    when tokenizer_config.json does not say so."""
    return (
        text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
        or (text.startswith("<|") and text.endswith("|>"))
        or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
        or (text.startswith("<unused") and text.endswith(">"))
    )


def read_tokenizer(folder: Path, vocab_size: int | None) -> TokenizerData:
    """The tokenizer of checkpoint `folder`, padded to `vocab_size` ids when given. Raises
    ValueError with a sentence when there is none or it cannot be converted."""
    if (folder / "tokenizer.model").is_file():
        return _sentencepiece(folder, vocab_size)
    if (folder / "tokenizer.json").is_file():
        return _byte_level_bpe(folder, vocab_size)
    raise ValueError(
        f"the folder {folder} has no tokenizer (tokenizer.json or tokenizer.model is missing)"
    )


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path.name} is not valid JSON: {e}") from None
    return data if isinstance(data, dict) else {}


def _sentencepiece(folder: Path, vocab_size: int | None) -> TokenizerData:
    pieces = read_pieces((folder / "tokenizer.model").read_bytes())
    n = vocab_size or len(pieces)
    tokens = [f"[PAD{i}]" for i in range(n)]
    scores = [-10000.0] * n
    types = [UNUSED] * n
    for i, p in enumerate(pieces[:n]):
        tokens[i], scores[i] = p.text, p.score
        types[i] = NORMAL if p.type == USER_DEFINED else p.type
    for text, i in _json(folder / "added_tokens.json").items():
        if 0 <= int(i) < n:
            tokens[int(i)], scores[int(i)], types[int(i)] = text, -1000.0, USER_DEFINED
    config = _json(folder / "tokenizer_config.json")
    for key, entry in (config.get("added_tokens_decoder") or {}).items():
        i, text = int(key), str(entry["content"])
        if not 0 <= i < n:
            continue
        if entry.get("special") or looks_special(text):
            types[i] = CONTROL
        else:
            text = text.replace("\u2581", " ")
            types[i] = USER_DEFINED
        tokens[i], scores[i] = text, -1000.0
    special = gguf.SpecialVocab(folder, load_merges=False, n_vocab=n)
    return TokenizerData("llama", "default", tokens, scores, types, special)


def _pre_name(tok: dict[str, Any]) -> str:
    pre = tok.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    patterns = [
        s["pattern"].get("Regex") for s in steps if s.get("type") == "Split" and "pattern" in s
    ]
    level = [s for s in steps if s.get("type") == "ByteLevel"]
    if not patterns and level and level[0].get("use_regex", True):
        return "gpt-2"
    if len(patterns) == 1 and patterns[0] in _PRE_BY_REGEX:
        return _PRE_BY_REGEX[patterns[0]]
    raise ValueError(
        "tokenizer.json's pre-tokenizer is not one Hearth recognises (known: GPT-2's, "
        "Llama 3's and Qwen 2's byte-level regexes)"
    )


def _byte_level_bpe(folder: Path, vocab_size: int | None) -> TokenizerData:
    tok = _json(folder / "tokenizer.json")
    model = tok.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise ValueError(
            f"tokenizer.json holds a {model.get('type', 'unknown')} model; Hearth converts "
            "byte-level BPE tokenizer.json files and SentencePiece tokenizer.model files"
        )
    if model.get("byte_fallback"):
        raise ValueError(
            "tokenizer.json is a SentencePiece-style BPE (byte fallback) and the folder has no "
            "tokenizer.model, which Hearth needs for it"
        )
    pre = _pre_name(tok)
    by_id: dict[int, str] = {int(i): t for t, i in model["vocab"].items()}
    added: dict[int, dict[str, Any]] = {}
    for entry in tok.get("added_tokens") or []:
        by_id[int(entry["id"])] = str(entry["content"])
        added[int(entry["id"])] = entry
    n = max(vocab_size or 0, max(by_id) + 1)
    tokens, types = [], []
    for i in range(n):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
            continue
        text = by_id[i]
        if i in added:
            if added[i].get("special") or looks_special(text):
                types.append(CONTROL)
            else:
                text = text.replace("\u2581", " ")
                types.append(USER_DEFINED)
        else:
            types.append(NORMAL)
        tokens.append(text)
    special = gguf.SpecialVocab(folder, load_merges=True, n_vocab=n)
    if not special.merges:
        raise ValueError("tokenizer.json has no merges, which a BPE tokenizer needs")
    return TokenizerData("gpt2", pre, tokens, None, types, special)
