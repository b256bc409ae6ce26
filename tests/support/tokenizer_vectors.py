"""llama.cpp's tokenizer reference vectors (tests/fixtures/vocab or $HEARTH_FIXTURES), read
the way its test-tokenizer-0 reads them, a streaming decode, and a sample document: shared by
the tokenizer tests in tests/engine."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from hearth.engine.tokenizer import StreamDecoder, Tokenizer

from support.paths import TESTS

SEPARATOR = "\n__ggml_vocab_test__\n"


def fixtures_dir() -> Path | None:
    """llama.cpp's vocab fixtures: $HEARTH_FIXTURES, else the copy in tests/fixtures/vocab."""
    candidates = []
    if os.environ.get("HEARTH_FIXTURES"):
        env = Path(os.environ["HEARTH_FIXTURES"])
        candidates += [env / "vocab", env]
    candidates.append(TESTS / "fixtures" / "vocab")
    for c in candidates:
        if (c / "ggml-vocab-llama-spm.gguf").exists():
            return c
    return None


FIXTURES = fixtures_dir()
needs_fixtures = pytest.mark.skipif(
    FIXTURES is None,
    reason="llama.cpp vocab fixtures not found (tests/fixtures/vocab, or set HEARTH_FIXTURES)",
)


def read_vectors(path: Path) -> list[tuple[str, list[int]]]:
    """(input, expected ids) pairs, read the way llama.cpp's test-tokenizer-0 reads them."""
    raw = Path(str(path) + ".inp").read_bytes().decode("utf-8")
    inputs = raw.split(SEPARATOR)
    if inputs and inputs[-1] == "":  # the file ends with a separator
        inputs.pop()
    lines = Path(str(path) + ".out").read_text(encoding="utf-8").splitlines()
    assert len(inputs) == len(lines), f"{path.name}: {len(inputs)} inputs, {len(lines)} outputs"
    return [(s, [int(x) for x in line.split()]) for s, line in zip(inputs, lines, strict=True)]


def stream(tok: Tokenizer, ids: list[int], skip_special: bool = True) -> list[str]:
    dec = StreamDecoder(tok, skip_special=skip_special)
    return [dec.feed(i) for i in ids] + [dec.flush()]


def sample_document(size: int = 100_000, seed: int = 0) -> str:
    """About `size` characters of mixed prose, code, numbers and a little non-Latin text."""
    rng = random.Random(seed)
    words = [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "that",
        "for",
        "it",
        "as",
        "was",
        "with",
        "be",
        "by",
        "on",
        "not",
        "he",
        "this",
        "are",
        "or",
        "his",
        "from",
        "at",
        "which",
        "but",
        "have",
        "an",
        "they",
        "you",
        "were",
        "her",
        "she",
        "there",
        "been",
        "one",
        "all",
        "we",
        "their",
        "can",
        "has",
        "tokenizer",
        "model",
        "engine",
        "quantization",
        "attention",
        "transformer",
        "inference",
        "latency",
    ]
    extras = [
        "3.14159",
        "2024",
        "x**2",
        "f(x)",
        "{'a': 1}",
        "naïve",
        "Straße",
        "Привет",
        "你好世界",
        "🙂",
        "...",
        "—",
        "e.g.,",
        "don't",
        "it's",
        "\n\n",
        "\t",
        "    ",
    ]
    parts: list[str] = []
    total = 0
    while total < size:
        w = rng.choice(extras) if rng.random() < 0.08 else rng.choice(words)
        if rng.random() < 0.1:
            w = w.capitalize()
        parts.append(w)
        total += len(w) + 1
    return " ".join(parts)[:size]
