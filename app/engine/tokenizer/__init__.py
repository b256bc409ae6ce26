"""Tokenizers built from GGUF metadata.

`load_tokenizer(meta)` reads `tokenizer.ggml.*` and returns a `Tokenizer`: SentencePiece-style
for `tokenizer.ggml.model == "llama"`, byte-level BPE for `"gpt2"`. Encoding and decoding match
llama.cpp (the GGUF reference implementation) token for token; see `detokenize` for decoding
rules and `special` for how special-token strings in text are recognised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .bpe import BytePairTokenizer
from .detokenize import StreamDecoder, detokenize, piece_bytes
from .pretokenize import PreTokenizer, get_pretokenizer
from .special import SpecialSplitter
from .spm import SPACE, SentencePieceTokenizer
from .vocab import TokenType, UnsupportedTokenizerError, Vocabulary

__all__ = [
    "StreamDecoder",
    "TokenType",
    "Tokenizer",
    "UnsupportedTokenizerError",
    "Vocabulary",
    "load_tokenizer",
]

_SPECIAL_TYPES = (TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.UNKNOWN)


class Tokenizer:
    """Text <-> token ids for one model. Build it with `load_tokenizer`.

    Attributes: `vocab_size`; `bos_id` / `eos_id` (or None); `eos_ids`, every id that ends
    generation (`eos_token_id`, `eos_token_ids`, `eot_token_id`, `eom_token_id` from the file,
    plus ids added with `add_eos_token`; token texts are not guessed); `add_bos` / `add_eos`,
    whether `encode(add_special=True)` adds them; `add_space_prefix` (SentencePiece: a space
    goes before the text); `clean_spaces` (BPE decoding tidies " ," etc., as llama.cpp does).
    One instance may be shared by threads: encoding only fills caches.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.vocab_size = len(vocab)
        self.model = vocab.model
        self.bos_id = vocab.bos_id
        self.eos_id = vocab.eos_id
        self.add_space_prefix = vocab.add_space_prefix
        self.add_eos = vocab.add_eos
        self.pre: PreTokenizer | None = None
        if vocab.model == "spm":
            self.add_bos = vocab.add_bos
            self.clean_spaces = False
            self._impl: SentencePieceTokenizer | BytePairTokenizer = SentencePieceTokenizer(vocab)
        else:
            self.pre = get_pretokenizer(vocab.pre)
            self.add_bos = vocab.add_bos if vocab.add_bos_set else self.pre.add_bos
            self.clean_spaces = self.pre.clean_spaces
            self._impl = BytePairTokenizer(vocab, self.pre)
        if self.add_bos and self.bos_id is None:
            self.add_bos = False
        if self.add_eos and self.eos_id is None:
            self.add_eos = False
        eos = {vocab.eos_id, vocab.eot_id, vocab.eom_id, *vocab.eos_token_ids}
        self.eos_ids: frozenset[int] = frozenset(i for i in eos if i is not None)

        types = vocab.types
        self._types = types
        specials: dict[str, int] = {}
        user_defined: dict[str, int] = {}
        for i in vocab.special_ids:
            text = vocab.tokens[i]
            specials.setdefault(text, i)
            if types[i] == TokenType.USER_DEFINED:
                user_defined.setdefault(text, i)
        # parse_special=True splits out CONTROL, USER_DEFINED and UNKNOWN token strings;
        # parse_special=False still splits USER_DEFINED ones (llama.cpp and HF do the same).
        self._split_all = SpecialSplitter(specials)
        self._split_user = SpecialSplitter(user_defined)
        self._pieces: dict[int, bytes] = {}

    # -- encoding ---------------------------------------------------------------------------

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids for `text`.

        `add_special`: prepend BOS if the model wants one (`add_bos`) and append EOS if it
        wants one (`add_eos`). `parse_special`: text equal to a CONTROL/UNKNOWN token (e.g.
        `<start_of_turn>`) becomes that token; without it such text is tokenized as plain
        characters. USER_DEFINED token strings always become their token.
        """
        out: list[int] = []
        if add_special and self.add_bos:
            out.append(self.bos_id)  # type: ignore[arg-type]
        fragments = (self._split_all if parse_special else self._split_user).split(text)
        impl = self._impl
        if isinstance(impl, SentencePieceTokenizer):
            prefix = self.add_space_prefix
            prev_special = True  # a space prefix goes before text at the start / after specials
            for frag in fragments:
                if isinstance(frag, int):
                    out.append(frag)
                    prev_special = True
                else:
                    if prefix and prev_special:
                        frag = " " + frag
                    impl.encode(frag.replace(" ", SPACE), out)
                    prev_special = False
        else:
            for frag in fragments:
                if isinstance(frag, int):
                    out.append(frag)
                else:
                    impl.encode(frag, out)
        if add_special and self.add_eos:
            out.append(self.eos_id)  # type: ignore[arg-type]
        return out

    # -- decoding ---------------------------------------------------------------------------

    def _piece(self, id: int, special: bool) -> bytes:
        piece = self._pieces.get(id)
        if piece is None:
            if not 0 <= id < self.vocab_size:
                last = self.vocab_size - 1
                raise ValueError(f"token id {id} is outside the vocabulary (0..{last})")
            piece = piece_bytes(self.vocab.tokens[id], self._types[id], self.model)
            self._pieces[id] = piece
        if not special and self._types[id] in (TokenType.CONTROL, TokenType.UNKNOWN):
            return b""
        return piece

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text for `ids`. `skip_special` hides CONTROL/UNKNOWN tokens and drops a leading BOS
        and trailing EOS the model adds itself; USER_DEFINED tokens always show."""
        return detokenize(self, ids, skip_special)

    def token_bytes(self, id: int) -> bytes:
        """The raw bytes of one token, special tokens included as their text."""
        return self._piece(id, True)

    # -- vocabulary queries -----------------------------------------------------------------

    def token_id(self, text: str) -> int | None:
        """The id of the token whose string is exactly `text` (vocabulary form, e.g. "▁the")."""
        return self.vocab.token_to_id.get(text)

    def token_type(self, id: int) -> TokenType:
        """The `TokenType` of `id` (UNDEFINED for values the format does not define)."""
        try:
            return TokenType(self._types[id])
        except ValueError:
            return TokenType.UNDEFINED

    def is_special(self, id: int) -> bool:
        """True for CONTROL, USER_DEFINED and UNKNOWN tokens (the ones `parse_special` finds)."""
        return 0 <= id < self.vocab_size and self._types[id] in _SPECIAL_TYPES

    def is_control(self, id: int) -> bool:
        """True for tokens `decode(skip_special=True)` hides (CONTROL and UNKNOWN)."""
        return 0 <= id < self.vocab_size and self._types[id] in (
            TokenType.CONTROL,
            TokenType.UNKNOWN,
        )

    def is_eos(self, id: int) -> bool:
        """True if `id` ends generation."""
        return id in self.eos_ids

    def add_eos_token(self, text: str) -> None:
        """Make the token spelled `text` (e.g. "<end_of_turn>") end generation too."""
        tid = self.token_id(text)
        if tid is None:
            raise ValueError(
                f"cannot use '{text}' as an end-of-generation token: it is not in the vocabulary"
            )
        self.eos_ids = self.eos_ids | {tid}

    def __repr__(self) -> str:
        kind = "SentencePiece" if self.model == "spm" else f"BPE/{self.vocab.pre or 'default'}"
        return f"<Tokenizer {kind} {self.vocab_size} tokens>"


def load_tokenizer(meta: Mapping[str, Any]) -> Tokenizer:
    """Build the tokenizer described by a GGUF file's metadata (`GGUFFile(path).metadata`).

    Raises `UnsupportedTokenizerError` (a `ValueError`) naming the tokenizer model when it is
    not "llama" (SentencePiece) or "gpt2" (byte-level BPE).
    """
    return Tokenizer(Vocabulary.from_metadata(meta))
