"""Tokenizer: llama.cpp's reference vectors, encode options, decoding, streaming and speed.

Comparisons against a live llama.cpp (and everything that needs the Gemma 3 file) are in
test_tokenizer_llamacpp.py.
"""

from __future__ import annotations

import random
import time

import pytest

from hearth.engine.gguf import GGUFFile
from hearth.engine.tokenizer import (
    Tokenizer,
    TokenType,
    load_tokenizer,
)
from hearth.engine.tokenizer.detokenize import clean_spaces

from support.tokenizer_vectors import (
    FIXTURES,
    needs_fixtures,
    read_vectors,
    sample_document,
    stream,
)

_CACHE: dict[str, Tokenizer] = {}


def fixture_tokenizer(name: str) -> Tokenizer:
    if name not in _CACHE:
        assert FIXTURES is not None
        _CACHE[name] = load_tokenizer(GGUFFile(FIXTURES / f"ggml-vocab-{name}.gguf").metadata)
    return _CACHE[name]


# -- llama.cpp's reference vectors -----------------------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("name", ["llama-spm", "llama-bpe"])
def test_reference_vectors_match_exactly(name: str) -> None:
    tok = fixture_tokenizer(name)
    vectors = read_vectors(FIXTURES / f"ggml-vocab-{name}.gguf")
    assert len(vectors) >= 40
    bad = []
    for text, expected in vectors:
        got = tok.encode(text, add_special=False, parse_special=False)
        if got != expected:
            bad.append((text, expected, got))
    assert not bad, f"{len(bad)} of {len(vectors)} differ, first: {bad[0]!r}"


@needs_fixtures
@pytest.mark.parametrize("name", ["llama-spm", "llama-bpe"])
def test_reference_vectors_decode_back(name: str) -> None:
    # SentencePiece gives the input back exactly; Llama 3's BPE applies llama.cpp's
    # clean_up_tokenization_spaces (" ?" -> "?", " 're" -> "'re"), as llama.cpp does.
    tok = fixture_tokenizer(name)
    for text, expected in read_vectors(FIXTURES / f"ggml-vocab-{name}.gguf"):
        want = clean_spaces(text) if tok.clean_spaces else text
        assert tok.decode(expected) == want, text
        assert tok.decode(expected, skip_special=True) == want, text


# -- encode options ---------------------------------------------------------------------------


@needs_fixtures
def test_spm_special_options() -> None:
    tok = fixture_tokenizer("llama-spm")
    assert (tok.bos_id, tok.eos_id, tok.add_bos, tok.add_eos) == (1, 2, True, False)
    assert tok.add_space_prefix and tok.eos_ids == frozenset({2})
    hello = tok.encode("Hello", add_special=False)
    assert tok.encode("Hello") == [1, *hello]
    assert tok.encode("") == [1] and tok.encode("", add_special=False) == []
    # "<s>" is CONTROL: only parse_special turns it into id 1; the space prefix returns after it
    assert tok.encode("<s>Hello", add_special=False) == [1, *hello]
    plain = tok.encode("<s>Hello", add_special=False, parse_special=False)
    assert 1 not in plain and tok.decode(plain) == "<s>Hello"
    assert tok.encode("<unk>", add_special=False) == [0]  # UNKNOWN tokens are split out too
    # llama.cpp: the first token takes the space removal, so after a BOS the space stays
    assert tok.decode([1, *hello]) == "<s> Hello"
    assert tok.decode([1, *hello], skip_special=True) == " Hello"
    assert tok.decode(hello) == "Hello"
    assert tok.decode([1, *hello, 2], skip_special=False) == "<s> Hello</s>"


@needs_fixtures
def test_bpe_special_options() -> None:
    tok = fixture_tokenizer("llama-bpe")
    assert tok.pre is not None and tok.pre.name == "llama-bpe"
    assert (tok.bos_id, tok.add_bos, tok.add_eos) == (128000, True, False)
    text = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    ids = tok.encode(text)
    assert ids[:2] == [128000, 128006] and ids[-1] == 128009
    assert tok.decode(ids) == "<|begin_of_text|>" + text
    assert tok.decode(ids, skip_special=True) == "user\n\nHi"
    plain = tok.encode(text, add_special=False, parse_special=False)
    assert all(i < 128000 for i in plain) and tok.decode(plain) == text
    assert not tok.is_eos(128009)
    tok2 = load_tokenizer(GGUFFile(FIXTURES / "ggml-vocab-llama-bpe.gguf").metadata)
    tok2.add_eos_token("<|eot_id|>")
    assert tok2.is_eos(128009) and tok2.is_eos(128001)
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok2.add_eos_token("<|no such token|>")


@needs_fixtures
def test_token_queries() -> None:
    spm = fixture_tokenizer("llama-spm")
    assert spm.token_bytes(spm.token_id("▁Hello")) == b" Hello"
    assert spm.token_bytes(spm.token_id("<0xE2>")) == b"\xe2"
    assert spm.token_bytes(1) == b"<s>" and spm.is_special(1) and spm.is_control(1)
    assert spm.token_type(3) == TokenType.BYTE and not spm.is_special(3)
    assert spm.token_id("no-such-token") is None
    bpe = fixture_tokenizer("llama-bpe")
    assert bpe.token_bytes(bpe.token_id("ĠHello")) == b" Hello"
    assert bpe.token_bytes(bpe.token_id("Ċ")) == b"\n"
    assert bpe.token_bytes(128009) == b"<|eot_id|>"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        bpe.decode([bpe.vocab_size])


# -- streaming --------------------------------------------------------------------------------


@needs_fixtures
def test_stream_waits_for_whole_characters() -> None:
    tok = fixture_tokenizer("llama-spm")
    # 🙂 is not in the llama vocabulary: it is four <0xHH> byte tokens
    ids = tok.encode("a🙂b", add_special=False)
    assert [tok.vocab.tokens[i] for i in ids[1:5]] == ["<0xF0>", "<0x9F>", "<0x99>", "<0x82>"]
    out = stream(tok, ids)
    assert out == ["a", "", "", "", "🙂", "b", ""]
    # an unfinished character comes out as U+FFFD only at the end
    assert stream(tok, ids[:3]) == ["a", "", "", "\ufffd"]


@needs_fixtures
@pytest.mark.parametrize("name", ["llama-spm", "llama-bpe"])
@pytest.mark.parametrize("skip_special", [True, False])
def test_stream_equals_decode(name: str, skip_special: bool) -> None:
    tok = fixture_tokenizer(name)
    rng = random.Random(7)
    texts = [s for s, _ in read_vectors(FIXTURES / f"ggml-vocab-{name}.gguf")]
    texts += ["Hello , world . It 's ' quoted ' , isn 't it ?", " ' ", "a 's 'm 're 've 'll"]
    specials = [tok.bos_id, tok.eos_id]
    for text in texts:
        ids = tok.encode(text, add_special=rng.random() < 0.7)
        assert "".join(stream(tok, ids, skip_special)) == tok.decode(ids, skip_special), text
    for _ in range(300):  # random ids: byte tokens, split characters, specials anywhere
        n = rng.randint(0, 12)
        ids = [
            rng.choice(specials) if rng.random() < 0.1 else rng.randrange(tok.vocab_size)
            for _ in range(n)
        ]
        assert "".join(stream(tok, ids, skip_special)) == tok.decode(ids, skip_special), ids


@needs_fixtures
def test_stream_holds_back_only_what_cleanup_may_change() -> None:
    tok = fixture_tokenizer("llama-bpe")
    ids = tok.encode("Hello world , how are you ?", add_special=False)
    out = stream(tok, ids)
    assert "".join(out) == "Hello world, how are you?"
    assert out[0] == "Hello"  # not held: nothing pending could change it


# -- speed ------------------------------------------------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("name", ["llama-spm", "llama-bpe"])
def test_100kb_tokenizes_under_a_second(name: str) -> None:
    tok = load_tokenizer(GGUFFile(FIXTURES / f"ggml-vocab-{name}.gguf").metadata)  # cold cache
    doc = sample_document()
    start = time.perf_counter()
    ids = tok.encode(doc)
    elapsed = time.perf_counter() - start
    assert len(ids) > 15_000
    assert elapsed < 1.0, f"{name}: 100 KB took {elapsed:.2f} s"
    assert ids[0] == tok.bos_id
    assert tok.decode(ids[1:]) == (clean_spaces(doc) if tok.clean_spaces else doc)
