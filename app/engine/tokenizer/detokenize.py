"""Token ids back to text, whole or streamed, following llama.cpp's `llama_detokenize`.

Per token (llama.cpp's `llama_token_to_piece`):

* CONTROL and UNKNOWN tokens render as their text when special tokens are shown, else as "";
* USER_DEFINED tokens always render as their text;
* NORMAL tokens: SentencePiece turns "▁" into a space, byte-level BPE maps each character
  back to its byte (characters outside GPT-2's byte map pass through as UTF-8);
* BYTE tokens (`<0xHH>`) are that single byte; UNUSED/undefined tokens render as "".

For the whole sequence: with `skip_special`, a leading BOS (when the model adds one) and a
trailing EOS (when it adds one) are dropped. When the model adds a space prefix, one leading
space is removed from the *first* token's piece (if that first token is a BOS that is kept, it
takes the removal and nothing is stripped, as in llama.cpp). BPE models with
`clean_up_tokenization_spaces` then drop the space before `? ! . ,` and before `'s 'm 're 've`,
and collapse " ' " to "'". The bytes are decoded as UTF-8 with invalid sequences replaced by
U+FFFD.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable
from typing import Protocol

from .bpe import UNICODE_TO_BYTE
from .vocab import TokenType

__all__ = ["StreamDecoder", "clean_spaces", "piece_bytes"]


class Tokenizer(Protocol):
    """What decoding reads of a tokenizer (hearth.engine.tokenizer.Tokenizer has it all)."""

    add_space_prefix: bool
    add_bos: bool
    add_eos: bool
    bos_id: int | None
    eos_id: int | None
    clean_spaces: bool

    def _piece(self, id: int, special: bool) -> bytes: ...


_SPACE = "\u2581"
_PUNCT = re.compile(r" ([?!.,])")
_QUOTE = re.compile(r" ' ")
_CONTRACTION = re.compile(r" '(?=[sm]|re|ve)")


def clean_spaces(text: str) -> str:
    """llama.cpp's clean-up passes, in order: " ?" -> "?", " ' " -> "'", " 's" -> "'s"."""
    if " " not in text:
        return text
    text = _PUNCT.sub(r"\1", text)
    text = _QUOTE.sub("'", text)
    return _CONTRACTION.sub("'", text)


def piece_bytes(text: str, ttype: int, model: str) -> bytes:
    """The bytes one token stands for when special tokens are shown."""
    if ttype in (TokenType.CONTROL, TokenType.UNKNOWN, TokenType.USER_DEFINED):
        return text.encode("utf-8", "surrogatepass")
    if ttype == TokenType.NORMAL:
        if model == "spm":
            return text.replace(_SPACE, " ").encode("utf-8", "surrogatepass")
        table = UNICODE_TO_BYTE
        try:
            return bytes([table[ch] for ch in text])
        except KeyError:
            return b"".join(
                bytes([table[ch]]) if ch in table else ch.encode("utf-8", "surrogatepass")
                for ch in text
            )
    if ttype == TokenType.BYTE:
        if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            try:
                return bytes([int(text[3:5], 16)])
            except ValueError:
                pass
        return text.encode("utf-8", "surrogatepass")
    return b""  # UNUSED / undefined: llama.cpp renders nothing


def detokenize(tok: Tokenizer, ids: Iterable[int], skip_special: bool) -> str:
    """`Tokenizer.decode` (see the module docstring for the rules)."""
    ids = list(ids)
    remove_space = tok.add_space_prefix
    if skip_special and tok.add_bos and ids and ids[0] == tok.bos_id:
        remove_space = False
        ids = ids[1:]
    if skip_special and tok.add_eos and ids and ids[-1] == tok.eos_id:
        ids = ids[:-1]
    piece = tok._piece
    pieces = [piece(i, not skip_special) for i in ids]
    if remove_space and pieces and pieces[0][:1] == b" ":
        pieces[0] = pieces[0][1:]
    text = b"".join(pieces).decode("utf-8", "replace")
    return clean_spaces(text) if tok.clean_spaces else text


class StreamDecoder:
    """Incremental detokenizer: feed ids one at a time, get text as soon as it is final.

    Never emits part of a UTF-8 character (a multi-byte character spread over several byte
    tokens comes out whole once its last byte arrives), and holds back the little text that
    the space clean-up of BPE models could still change. `"".join(feeds) + flush()` equals
    `tokenizer.decode(ids, skip_special)`.
    """

    def __init__(
        self, tokenizer: Tokenizer, skip_special: bool = True, show: Iterable[int] = ()
    ) -> None:
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self.show = frozenset(show)  # special ids rendered as their text even when skipped
        self._reset()

    def _reset(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._started = False
        self._remove_space = self.tokenizer.add_space_prefix
        self._held_eos = 0  # trailing EOS ids: dropped if the stream ends with them
        self._tail = ""  # decoded text not yet emitted (the clean-up may still change it)

    def _render(self, id: int) -> bytes:
        piece = self.tokenizer._piece(id, not self.skip_special or id in self.show)
        if self._remove_space:  # only the first token of the sequence
            self._remove_space = False
            if piece[:1] == b" ":
                piece = piece[1:]
        return piece

    def feed(self, id: int) -> str:
        """Add one token; return the text that became final (often "", never half a char)."""
        tok = self.tokenizer
        skip = self.skip_special
        if not self._started:
            self._started = True
            if skip and tok.add_bos and id == tok.bos_id:
                self._remove_space = False
                return ""
        if skip and tok.add_eos and id == tok.eos_id:
            self._held_eos += 1
            return ""
        data = b""
        if self._held_eos and tok.eos_id is not None:
            data = b"".join(self._render(tok.eos_id) for _ in range(self._held_eos))
            self._held_eos = 0
        data += self._render(id)
        return self._emit(self._utf8.decode(data), final=False)

    def flush(self) -> str:
        """Return whatever is left (incomplete UTF-8 becomes U+FFFD) and reset the stream."""
        data = b""
        eos = self.tokenizer.eos_id
        if self._held_eos > 1 and eos is not None:  # decode() drops only the last EOS
            data = b"".join(self._render(eos) for _ in range(self._held_eos - 1))
        text = self._emit(self._utf8.decode(data, final=True), final=True)
        self._reset()
        return text

    def _emit(self, new: str, final: bool) -> str:
        if not self.tokenizer.clean_spaces:
            return new
        text = self._tail + new
        if final:
            self._tail = ""
            return clean_spaces(text)
        # Cut where no clean-up pattern (at most 4 chars, starting with a space) can straddle:
        # the 3 characters before the cut must not contain a space.
        cut = len(text)
        while cut > 0 and " " in text[max(0, cut - 3) : cut]:
            cut = text.rfind(" ", 0, cut)
        self._tail = text[cut:]
        return clean_spaces(text[:cut])
