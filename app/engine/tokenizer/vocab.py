"""The vocabulary part of a GGUF file: token strings, scores, types, merges and special ids.

Everything here is read once at load time from `tokenizer.ggml.*` metadata and kept in plain
Python lists and dicts, because the tokenizers look tokens up many times per call.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

__all__ = ["TokenType", "Vocabulary", "UnsupportedTokenizerError"]

log = logging.getLogger(__name__)


class TokenType(IntEnum):
    """`tokenizer.ggml.token_type` values (the numbering llama.cpp and Ollama use)."""

    UNDEFINED = 0
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


class UnsupportedTokenizerError(ValueError):
    """The file uses a tokenizer model Hearth does not implement; the message names it."""


# tokenizer.ggml.model -> the family we implement.
_MODEL_FAMILY = {"llama": "spm", "gpt2": "bpe"}

# Default special ids per family when the file does not set them (llama.cpp's SPM defaults).
_SPM_DEFAULTS = {"bos": 1, "eos": 2, "unk": 0}

_ID_KEYS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "eot": "tokenizer.ggml.eot_token_id",
    "eom": "tokenizer.ggml.eom_token_id",
    "unk": "tokenizer.ggml.unknown_token_id",
    "sep": "tokenizer.ggml.seperator_token_id",
    "pad": "tokenizer.ggml.padding_token_id",
}


def _get(meta: Mapping[str, Any], key: str, default: Any = None) -> Any:
    v = meta.get(key)
    return default if v is None else v


@dataclass
class Vocabulary:
    """Token table plus the flags and special ids found in `tokenizer.ggml.*` metadata.

    `model` is "spm" or "bpe". Ids are `None` when the file does not name them (SPM files get
    llama.cpp's defaults: bos 1, eos 2, unk 0, when those ids exist).
    """

    model: str
    tokenizer_model: str
    pre: str
    tokens: list[str]
    types: list[int]
    scores: list[float]
    merges: list[str]
    token_to_id: dict[str, int]
    bos_id: int | None = None
    eos_id: int | None = None
    eot_id: int | None = None
    eom_id: int | None = None
    unk_id: int | None = None
    sep_id: int | None = None
    pad_id: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)
    special_ids: list[int] = field(default_factory=list)  # CONTROL, USER_DEFINED, UNKNOWN
    add_bos: bool = False
    add_eos: bool = False
    add_bos_set: bool = False  # the file said explicitly (pre-tokenizers may pick a default)
    add_space_prefix: bool = False

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> Vocabulary:
        """Read the vocabulary; raises `UnsupportedTokenizerError` for unknown model types."""
        tok_model = str(_get(meta, "tokenizer.ggml.model", ""))
        family = _MODEL_FAMILY.get(tok_model)
        if family is None:
            if not tok_model:
                raise UnsupportedTokenizerError(
                    "the model file has no tokenizer (tokenizer.ggml.model is missing)"
                )
            raise UnsupportedTokenizerError(
                f"tokenizer model '{tok_model}' is not supported; Hearth supports "
                "'llama' (SentencePiece) and 'gpt2' (byte-level BPE) tokenizers"
            )
        raw_tokens = _get(meta, "tokenizer.ggml.tokens")
        if raw_tokens is None or len(raw_tokens) == 0:
            raise UnsupportedTokenizerError(
                "the model file has no token list (tokenizer.ggml.tokens is missing)"
            )
        tokens = list(raw_tokens)
        n = len(tokens)
        if "" in tokens:  # llama.cpp renames empty tokens the same way
            tokens = [t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
        raw_types = _get(meta, "tokenizer.ggml.token_type")
        types = _int_list(raw_types, n, int(TokenType.NORMAL))
        scores = _float_list(_get(meta, "tokenizer.ggml.scores"), n)
        merges = list(_get(meta, "tokenizer.ggml.merges", []))
        if family == "bpe" and not merges:
            raise UnsupportedTokenizerError(
                "the BPE tokenizer has no merges (tokenizer.ggml.merges is missing)"
            )
        # Later duplicates win, as in llama.cpp's token_to_id map.
        token_to_id = dict(zip(tokens, range(n), strict=True))

        vocab = cls(
            model=family,
            tokenizer_model=tok_model,
            pre=str(_get(meta, "tokenizer.ggml.pre", "")),
            tokens=tokens,
            types=types,
            scores=scores,
            merges=merges,
            token_to_id=token_to_id,
            special_ids=_special_ids(raw_types, types),
        )
        defaults = _SPM_DEFAULTS if family == "spm" else {}
        for name, key in _ID_KEYS.items():
            value = _get(meta, key)
            tid = int(value) if value is not None else defaults.get(name)
            if tid is not None and not 0 <= tid < n:
                log.warning("tokenizer: %s = %d is outside the vocabulary; ignored", key, tid)
                tid = None
            setattr(vocab, f"{name}_id", tid)
        eos_list = _get(meta, "tokenizer.ggml.eos_token_ids")
        if eos_list is not None:
            vocab.eos_token_ids = [int(x) for x in _as_sequence(eos_list) if 0 <= int(x) < n]

        add_bos = _get(meta, "tokenizer.ggml.add_bos_token")
        vocab.add_bos_set = add_bos is not None
        vocab.add_bos = bool(add_bos) if add_bos is not None else family == "spm"
        vocab.add_eos = bool(_get(meta, "tokenizer.ggml.add_eos_token", False))
        # SentencePiece adds a space before the text by default; for BPE the flag only makes
        # decoding drop the first token's leading space (llama.cpp reads it for every model).
        prefix = _get(meta, "tokenizer.ggml.add_space_prefix")
        vocab.add_space_prefix = bool(prefix) if prefix is not None else family == "spm"
        return vocab


_SPECIAL_TYPES = (int(TokenType.CONTROL), int(TokenType.USER_DEFINED), int(TokenType.UNKNOWN))


def _special_ids(raw: Any, types: list[int]) -> list[int]:
    if hasattr(raw, "dtype") and len(raw) == len(types):
        return np.flatnonzero(np.isin(np.asarray(raw), _SPECIAL_TYPES)).tolist()
    return [i for i, t in enumerate(types) if t in _SPECIAL_TYPES]


def _as_sequence(value: Any) -> Sequence[Any]:
    if hasattr(value, "tolist"):
        value = value.tolist()
    return value if isinstance(value, list | tuple) else [value]


def _int_list(value: Any, n: int, default: int) -> list[int]:
    if value is None:
        return [default] * n
    seq = _as_sequence(value)
    out = list(seq[:n]) if hasattr(value, "dtype") else [int(x) for x in seq[:n]]
    return out + [default] * (n - len(out))


def _float_list(value: Any, n: int) -> list[float]:
    if value is None:
        return [0.0] * n
    seq = _as_sequence(value)
    out = list(seq[:n]) if hasattr(value, "dtype") else [float(x) for x in seq[:n]]
    return out + [0.0] * (n - len(out))
