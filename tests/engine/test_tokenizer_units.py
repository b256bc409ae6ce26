"""Tokenizer pieces without model files: special-token splitting, pre-tokenizer regexes,
token kinds on small synthetic vocabularies, and error messages."""

from __future__ import annotations

import logging
import random

import pytest

from hearth.engine.tokenizer import (
    StreamDecoder,
    Tokenizer,
    UnsupportedTokenizerError,
    load_tokenizer,
)
from hearth.engine.tokenizer.pretokenize import KNOWN_PRE, get_pretokenizer
from hearth.engine.tokenizer.special import SpecialSplitter

from support.tokenizer_vectors import stream


def test_special_split_follows_llama_cpp_order() -> None:
    # Longest token first, each claiming leftmost non-overlapping occurrences: "bcd" wins over
    # the earlier "ab" (a left-to-right longest-match scan would take "ab").
    split = SpecialSplitter({"ab": 10, "bcd": 11, "d": 12, "<x>": 13}).split
    assert split("abcd") == ["a", 11]
    # "abc" at 0 runs into the earlier-claimed "bcde"; "a" (a prefix of it) still fits
    assert SpecialSplitter({"a": 1, "abc": 2, "bcde": 3}).split("abcde") == [1, 3]
    assert split("ab d<x>") == [10, " ", 12, 13]
    assert split("dddab") == [12, 12, 12, 10]
    assert split("none here") == ["none here"]
    assert split("") == []
    assert SpecialSplitter({}).split("abc") == ["abc"]


def reference_split(specials: dict[str, int], text: str) -> list[str | int]:
    """llama.cpp's tokenizer_st_partition, written naively: fragments split token by token."""
    order = sorted(specials, key=lambda t: (-len(t.encode()), specials[t]))
    frags: list[tuple[int, int] | int] = [(0, len(text))] if text else []
    for tok in order:
        nxt: list[tuple[int, int] | int] = []
        for frag in frags:
            if isinstance(frag, int):
                nxt.append(frag)
                continue
            pos, end = frag
            while (hit := text.find(tok, pos, end)) >= 0:
                if hit > pos:
                    nxt.append((pos, hit))
                nxt.append(specials[tok])
                pos = hit + len(tok)
            if pos < end:
                nxt.append((pos, end))
        frags = nxt
    return [f if isinstance(f, int) else text[f[0] : f[1]] for f in frags]


def test_special_split_equals_naive_llama_cpp_partition() -> None:
    rng = random.Random(3)
    for _ in range(3000):
        alphabet = rng.choice(["ab", "abc", "ab<>\n é"])
        tokens = {
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5)))
            for _ in range(rng.randint(1, 7))
        }
        specials = {t: i for i, t in enumerate(sorted(tokens))}
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert SpecialSplitter(specials).split(text) == reference_split(specials, text), (
            specials,
            text,
        )


def test_pretokenizers_compile_and_cover_text() -> None:
    text = "Hello, y'all! 3.14159 + 42 ＝ 你好世界 Ünïcödé\n\n\t  émoji 🙂  end "
    for name, pre in KNOWN_PRE.items():
        pieces = pre.split(text)
        assert "".join(pieces) == text, name
        assert all(pieces), name


def test_unknown_pretokenizer_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        pre = get_pretokenizer("brand-new-model")
    assert "brand-new-model" in caplog.text
    assert pre.split("I'm here  123456") == ["I", "'m", " here", " ", " ", "123", "456"]


# -- synthetic vocabularies (metadata as a plain dict) -------------------------------------


def synthetic_spm(extra: dict | None = None, **scores: float) -> Tokenizer:
    """<unk> <s> </s>, a few pieces, and one token of each special kind."""
    pieces = {"▁": -5.0, "a": -1.0, "b": -1.0, "c": -1.0, "▁a": -2.0, "ab": -3.0, "bc": -3.0}
    pieces.update(scores)
    tokens = ["<unk>", "<s>", "</s>", *pieces, "<junk>", "<ud>", "<ctl>", ""]
    types = [2, 3, 3] + [1] * len(pieces) + [5, 4, 3, 1]
    meta = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0, 0.0, 0.0, *pieces.values(), 0.0, 0.0, 0.0, 0.0],
        "tokenizer.ggml.token_type": types,
        **(extra or {}),
    }
    return load_tokenizer(meta)


def test_spm_merges_highest_score_first() -> None:
    tok = synthetic_spm()
    ab, bc = tok.token_id("ab"), tok.token_id("bc")
    a, c = tok.token_id("a"), tok.token_id("c")
    assert tok.encode("abc", add_special=False, parse_special=False) == [tok.token_id("▁a"), bc]
    tok = synthetic_spm(extra={"tokenizer.ggml.add_space_prefix": False}, ab=-2.0, bc=-2.5)
    assert tok.encode("abc", add_special=False) == [ab, c]
    tok = synthetic_spm(extra={"tokenizer.ggml.add_space_prefix": False}, ab=-2.5, bc=-2.0)
    assert tok.encode("abc", add_special=False) == [a, bc]
    # no byte tokens in this vocabulary: unknown characters become <unk>
    assert tok.encode("aé", add_special=False) == [a, 0, 0]


def test_token_kinds_decode_like_llama_cpp() -> None:
    tok = synthetic_spm()
    junk, ud, ctl, empty = (tok.token_id(t) for t in ("<junk>", "<ud>", "<ctl>", "[EMPTY_13]"))
    assert empty == 13  # empty token strings are renamed like llama.cpp does
    assert tok.encode("<ud>x<ctl>", add_special=False, parse_special=False)[0] == ud
    assert tok.decode([junk]) == "" and tok.token_bytes(junk) == b""  # UNUSED: nothing
    assert tok.decode([ud], skip_special=True) == "<ud>"  # USER_DEFINED: always shown
    assert tok.decode([ctl]) == "<ctl>" and tok.decode([ctl], skip_special=True) == ""
    assert tok.is_special(ud) and tok.is_special(ctl) and not tok.is_special(junk)


def test_a_stream_shows_the_control_tokens_it_is_asked_to() -> None:
    """The runner hides control tokens but shows the tool-call and thinking markers the
    service parses (CompletionRequest.show_tokens), as llama.cpp keeps its preserved tokens."""
    tok = synthetic_spm()
    ctl, a = tok.token_id("<ctl>"), tok.token_id("▁a")
    assert "".join(stream(tok, [ctl, a], True)) == " a"
    decoder = StreamDecoder(tok, show=[ctl])
    assert "".join([decoder.feed(ctl), decoder.feed(a), decoder.flush()]) == "<ctl> a"


def test_add_eos_and_trailing_eos_handling() -> None:
    tok = synthetic_spm(extra={"tokenizer.ggml.add_eos_token": True})
    ids = tok.encode("ab")
    assert ids[0] == 1 and ids[-1] == 2 and tok.add_eos
    for seq in (ids, [*ids, 2], [2, *ids], [2], [1], [1, 2], [ids[1], 2, ids[1]]):
        for skip in (True, False):
            assert "".join(stream(tok, seq, skip)) == tok.decode(seq, skip), (seq, skip)
    assert tok.decode(ids, skip_special=True) == " ab"
    assert tok.decode(ids) == "<s> ab</s>"


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["bert", "t5", "rwkv", "plamo2"])
def test_unsupported_tokenizer_model_is_named(model: str) -> None:
    meta = {"tokenizer.ggml.model": model, "tokenizer.ggml.tokens": ["a", "b"]}
    with pytest.raises(UnsupportedTokenizerError, match=f"'{model}'") as err:
        load_tokenizer(meta)
    assert isinstance(err.value, ValueError)


def test_missing_tokenizer_is_explained() -> None:
    with pytest.raises(ValueError, match="no tokenizer"):
        load_tokenizer({})
    with pytest.raises(ValueError, match="merges"):
        load_tokenizer({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a"]})
