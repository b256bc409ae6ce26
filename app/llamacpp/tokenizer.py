"""Hearth's `Tokenizer` interface over llama.cpp's own vocabulary (`llama_tokenize`,
`llama_token_to_piece`), so the runner's sequences, stream decoder and grammars work unchanged
on a model llama.cpp loaded.

Encoding is llama.cpp's; decoding joins llama.cpp's token pieces with Hearth's detokenizer
rules (the same rules as llama.cpp's `llama_detokenize`: leading-space removal for
SentencePiece vocabularies, the space clean-up), which keeps `StreamDecoder` and `decode` equal.
The two vocabulary flags those rules need and llama.cpp keeps private are probed from its own
behaviour (see `_probe_space_prefix`, `_probe_clean_spaces`).
"""

from __future__ import annotations

import ctypes
from typing import Any

from ..engine.tokenizer import Tokenizer, TokenType

__all__ = ["LlamaCppTokenizer"]

_SPM = 1  # LLAMA_VOCAB_TYPE_SPM


class LlamaCppTokenizer(Tokenizer):
    """A `Tokenizer` whose vocabulary is a loaded llama.cpp model's (`llama_model_get_vocab`).

    `lib` is the `llama_cpp` module; `vocab` the `const llama_vocab *`. It must not outlive
    the model it came from.
    """

    def __init__(self, lib: Any, vocab: int) -> None:
        self._lib = lib
        self._vocab = vocab
        n = int(lib.llama_vocab_n_tokens(vocab))
        self.vocab_size = n
        self.model = "spm" if int(lib.llama_vocab_type(vocab)) == _SPM else "bpe"
        bos, eos = int(lib.llama_vocab_bos(vocab)), int(lib.llama_vocab_eos(vocab))
        self.bos_id = bos if bos >= 0 else None
        self.eos_id = eos if eos >= 0 else None
        self.add_bos = bool(lib.llama_vocab_get_add_bos(vocab)) and self.bos_id is not None
        self.add_eos = bool(lib.llama_vocab_get_add_eos(vocab)) and self.eos_id is not None
        self.pre = None
        attr = lib.llama_vocab_get_attr
        self._attrs = [int(attr(vocab, i)) for i in range(n)]
        self.eos_ids = frozenset(i for i in range(n) if lib.llama_vocab_is_eog(vocab, i))
        self._pieces: dict[int, bytes] = {}
        self._kinds: dict[int, TokenType] = {}  # asked for per generated token: remembered
        self._texts: dict[str, int] | None = None
        self.add_space_prefix = self.model == "spm" and self._probe_space_prefix()
        self.clean_spaces = self._probe_clean_spaces()

    # -- probes ---------------------------------------------------------------------------
    def _probe_space_prefix(self) -> bool:
        """llama.cpp puts a space before SentencePiece text when the file says so: then the
        first piece of "a" starts with a space."""
        ids = self.encode("a", add_special=False, parse_special=False)
        return bool(ids) and self._piece(ids[0], True).startswith(b" ")

    def _probe_clean_spaces(self) -> bool:
        """llama.cpp's detokenizer tidies " ," to "," when the vocabulary asks for it."""
        ids = self.encode("x ,", add_special=False, parse_special=False)
        arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        buf = ctypes.create_string_buffer(64)
        n = self._lib.llama_detokenize(self._vocab, arr, len(ids), buf, 64, False, False)
        return n > 0 and buf.raw[:n].decode("utf-8", "replace").strip() == "x,"

    # -- encoding -------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """llama.cpp's `llama_tokenize` (BOS/EOS per the file when `add_special`; special
        token strings become their tokens when `parse_special`)."""
        data = text.encode("utf-8", "surrogatepass")
        size = len(data) + 8
        while True:
            out = (ctypes.c_int32 * size)()
            n = self._lib.llama_tokenize(
                self._vocab, data, len(data), out, size, add_special, parse_special
            )
            if n >= 0:
                return list(out[:n])
            size = -n

    # -- decoding -------------------------------------------------------------------------
    def _piece(self, id: int, special: bool) -> bytes:
        piece = self._pieces.get(id)
        if piece is None:
            if not 0 <= id < self.vocab_size:
                last = self.vocab_size - 1
                raise ValueError(f"token id {id} is outside the vocabulary (0..{last})")
            piece = self._render(id)
            self._pieces[id] = piece
        if not special and self.is_control(id):
            return b""
        return piece

    def _render(self, id: int) -> bytes:
        size = 32
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self._lib.llama_token_to_piece(self._vocab, id, buf, size, 0, True)
            if n >= 0:
                return buf.raw[:n]
            size = -n

    # -- vocabulary queries ---------------------------------------------------------------
    def token_id(self, text: str) -> int | None:
        if self._texts is None:
            texts: dict[str, int] = {}
            get = self._lib.llama_vocab_get_text
            for i in range(self.vocab_size):
                raw = get(self._vocab, i) or b""
                texts.setdefault(raw.decode("utf-8", "replace"), i)
            self._texts = texts
        return self._texts.get(text)

    def token_type(self, id: int) -> TokenType:
        kind = self._kinds.get(id)
        if kind is None:
            kind = self._kinds[id] = self._type_of(self._attrs[id])
        return kind

    def _type_of(self, a: int) -> TokenType:
        lib = self._lib
        for flag, kind in (
            (lib.LLAMA_TOKEN_ATTR_CONTROL, TokenType.CONTROL),
            (lib.LLAMA_TOKEN_ATTR_USER_DEFINED, TokenType.USER_DEFINED),
            (lib.LLAMA_TOKEN_ATTR_UNKNOWN, TokenType.UNKNOWN),
            (lib.LLAMA_TOKEN_ATTR_BYTE, TokenType.BYTE),
            (lib.LLAMA_TOKEN_ATTR_UNUSED, TokenType.UNUSED),
            (lib.LLAMA_TOKEN_ATTR_NORMAL, TokenType.NORMAL),
        ):
            if a & flag:
                return kind
        return TokenType.UNDEFINED

    def is_special(self, id: int) -> bool:
        return 0 <= id < self.vocab_size and self.token_type(id) in (
            TokenType.CONTROL,
            TokenType.USER_DEFINED,
            TokenType.UNKNOWN,
        )

    def is_control(self, id: int) -> bool:
        return 0 <= id < self.vocab_size and self.token_type(id) in (
            TokenType.CONTROL,
            TokenType.UNKNOWN,
        )

    def __repr__(self) -> str:
        return f"<LlamaCppTokenizer {self.model} {self.vocab_size} tokens>"
