"""Stop strings with structured output: the output always parses.

A stop string ends a constrained output only where the text before it is a whole document;
inside a string, a key or an unfinished value it is plain text. First with scripted token
streams on the tiny llama's vocabulary (every situation forced exactly), then with the real
runner, whose random tiny model writes many different documents.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from hearth.engine.gguf import GGUFFile
from hearth.engine.grammar import JsonConstraint, TokenTable, schema_from_format
from hearth.engine.sampling import SamplingOptions
from hearth.engine.tokenizer import Tokenizer, load_tokenizer
from hearth.runner.core import Runner, RunnerConfig
from hearth.runner.protocol import (
    CompletionDone,
    CompletionError,
    CompletionOptions,
    CompletionRequest,
)
from hearth.runner.sequence import Sequence, SequenceSettings

from support.runner import collect

EOS = "<eos>"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
        "n": {"type": "integer"},
    },
    "required": ["name", "tags", "n"],
    "additionalProperties": False,
}
DOC = '{"name": "x, y} \\"q\\" a\\nb",\n "tags": ["t,1", "}"], "n": 12}'  # also fits SCHEMA


# -- scripted token streams ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def vocab(tiny_llama_path) -> tuple[Tokenizer, TokenTable]:
    tok = load_tokenizer(GGUFFile(tiny_llama_path).metadata)
    return tok, TokenTable.from_tokenizer(tok)


class Script:
    """A sequence fed chosen tokens (one byte token per byte, or end-of-sequence)."""

    def __init__(self, vocab: tuple[Tokenizer, TokenTable], stop: list[str], fmt: Any) -> None:
        tok, table = vocab
        constraint = None if fmt is None else JsonConstraint(table, schema_from_format(fmt))
        sampling = SamplingOptions(temperature=0, repeat_penalty=1.0)
        # Every token's text goes out at once (no coalescing): these tests read what is held.
        settings = SequenceSettings(sampling=sampling, stop=tuple(stop), stream_interval=0)
        self.tok = tok
        self.seq = Sequence([1], settings, tok, num_ctx=256, constraint=constraint)
        self.chunks: list[str] = []
        self.done: CompletionDone | None = None

    def feed(self, text: str) -> bool:
        """Feed `text` byte by byte (or end-of-sequence); False once the sequence ended."""
        ids = [self.tok.eos_id] if text == EOS else [self._byte(b) for b in text.encode()]
        for i in ids:
            logits = np.zeros(self.tok.vocab_size, dtype=np.float32)
            logits[i] = 100.0
            token = self.seq.accept_logits(logits)
            self._drain()
            if token is None:
                return False
            assert token == i, "the script wrote something the grammar refused"
        return True

    def run(self, *parts: str) -> str:
        for part in parts:
            if not self.feed(part):
                break
        assert self.done is not None, "the sequence did not end"
        return self.text

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def _byte(self, b: int) -> int:
        i = self.tok.token_id(f"<0x{b:02X}>")
        assert i is not None
        return i

    def _drain(self) -> None:
        while not self.seq.events.empty():
            event = self.seq.events.get_nowait()
            if event is None:
                continue
            assert not isinstance(event, CompletionError), event
            if isinstance(event, CompletionDone):
                self.done = event
            else:
                self.chunks.append(event.content)


@pytest.mark.parametrize("fmt", ["json", SCHEMA])
@pytest.mark.parametrize("stop", [",", "}", "\n", '"', "a", ": ", '"}', "12", "x, y} "])
def test_a_stop_string_inside_the_document_is_ignored(vocab, fmt, stop):
    s = Script(vocab, [stop], fmt)
    assert s.run(DOC) == DOC
    assert s.done is not None and s.done.done_reason == "stop"  # the grammar's end
    assert json.loads(s.text)["n"] == 12


def test_many_stop_strings_at_once_and_the_end_of_turn(vocab):
    s = Script(vocab, [",", "}", "\n", '"', "tags", "t,1"], "json")
    assert s.run('{"a": [1, "t,1"]', "}") == '{"a": [1, "t,1"]}'
    s = Script(vocab, [",", "]"], {"type": "array", "items": {"type": "integer"}})
    assert s.run("[1, 2]") == "[1, 2]"


def test_text_that_cannot_be_cut_is_streamed_at_once(vocab):
    """A stop string's first characters are only held back where it could be honoured."""
    s = Script(vocab, ["abc", '"}'], "json")
    sent = ""
    for part in ['{"k": "xa', "b", '"', "}"]:
        sent += part
        if s.feed(part):
            assert s.text == sent  # nothing held for "abc" or '"}'
    assert s.text == '{"k": "xab"}'


def test_a_stop_string_after_a_whole_number_ends_it(vocab):
    s = Script(vocab, ["34"], {"type": "integer"})
    assert s.run("12", "3", "4", "5", EOS) == "12"
    assert s.done is not None and s.done.done_reason == "stop"
    assert s.seq.generated == [s._byte(b) for b in b"1234"]  # "34" completed, then the end
    one = Script(vocab, ["3"], {"type": "integer"})
    one.feed("12")
    assert one.text == "12"  # streamed: a stop string may follow, but none has begun
    assert one.run("3", "4", EOS) == "12"


def test_a_stop_string_before_the_value_is_whole_is_ignored(vocab):
    assert Script(vocab, ["-"], {"type": "integer"}).run("-12", EOS) == "-12"
    assert Script(vocab, ["1"], {"type": "integer"}).run("1", "0", EOS) == "10"
    assert Script(vocab, ["tr"], {"type": "boolean"}).run("true", EOS) == "true"
    # "1" is already a whole number: a stop there is honoured, and the output still parses
    assert Script(vocab, ["e"], {"type": "number"}).run("1.5e3", EOS) == "1.5"


def test_held_text_is_sent_when_the_stop_string_never_completes(vocab):
    s = Script(vocab, ["34"], {"type": "integer"})
    s.feed("123")
    assert s.text == "12"  # "3" may begin "34"
    assert s.run(EOS) == "123"
    assert s.done is not None and s.done.context[1:] == s.seq.generated
    assert Script(vocab, ["world"], None).run("Hello wor", EOS) == "Hello wor"


def test_without_format_stop_strings_cut_as_before(vocab):
    for stop in [",", "}", '"', "a"]:
        s = Script(vocab, [stop], None)
        assert s.run(DOC) == DOC[: DOC.index(stop)]
        assert s.done is not None and s.done.done_reason == "stop"
    s = Script(vocab, ["cd"], None)
    s.feed("abc")
    assert s.text == "ab"  # the start of a stop string is never sent
    assert s.run("d", "e") == "ab"


# -- the real runner on a random tiny model --------------------------------------------------


@pytest.fixture(scope="module")
def llama(tiny_llama_path):
    runner = Runner(RunnerConfig(str(tiny_llama_path), num_ctx=1024, parallel=4, num_batch=64))
    yield runner
    runner.close()


def _generate(
    runner: Runner, fmt: Any, stop: list[str], n: int, num_predict: int = 900
) -> list[tuple[str, CompletionDone]]:
    """n sampled outputs (seeds and temperatures vary), submitted together."""
    reqs = [
        CompletionRequest(
            tokens=[1, 5, 6, 7],
            format=fmt,
            options=CompletionOptions(
                seed=i,
                temperature=(0.7, 1.0, 1.3)[i % 3],
                num_predict=num_predict,
                stop=stop,
            ),
        )  # fmt: skip
        for i in range(n)
    ]
    return [collect(s) for s in [runner.completion(r) for r in reqs]]


STOPS = [",", "}", "]", "\n", '"', "a", ": ", "\\"]


@pytest.mark.parametrize("fmt", ["json", SCHEMA])
def test_json_output_with_stop_strings_always_parses(llama, fmt):
    with_stops = _generate(llama, fmt, STOPS, 12)
    without = _generate(llama, fmt, [], 12)
    for (text, done), (free, _) in zip(with_stops, without, strict=True):
        assert text == free  # a stop string inside a document changes nothing
        if done.done_reason == "stop":
            doc = json.loads(text)
            assert fmt == "json" or set(doc) == {"name", "tags", "n"}
    finished = [d for _, d in with_stops if d.done_reason == "stop"]
    assert len(finished) >= 10
    assert len({t for t, _ in with_stops}) >= 10  # many different documents
    assert sum(any(s in t for s in STOPS) for t, _ in with_stops) >= 10


def test_a_stop_string_cuts_a_top_level_integer_only_where_it_is_whole(llama):
    with_stop = _generate(llama, {"type": "integer"}, ["7"], 12)
    without = _generate(llama, {"type": "integer"}, [], 12)
    cuts = 0
    for (text, done), (free, _) in zip(with_stop, without, strict=True):
        assert isinstance(json.loads(text), int) and done.done_reason == "stop"
        assert free.startswith(text)
        if text != free:
            cuts += 1
            assert free[len(text)] == "7"
        assert "7" not in text.lstrip(" \t\n-")[1:]  # only a first digit may be a "7"
    assert cuts >= 1


def test_without_format_the_runner_still_cuts_at_stop_strings(llama):
    with_stop = _generate(llama, None, ["a"], 8, num_predict=80)
    without = _generate(llama, None, [], 8, num_predict=80)
    cuts = 0
    for (text, done), (free, _) in zip(with_stop, without, strict=True):
        assert "a" not in text and free.startswith(text)
        if "a" in free:
            cuts += 1
            assert text == free[: free.index("a")] and done.done_reason == "stop"
    assert cuts >= 4


@pytest.mark.parametrize(
    ("stops", "parts", "text", "stop"),
    [
        (["END", "\n"], ["ab END c\nd"], "ab ", "END"),  # the earliest in the text wins
        (["END", "\n"], ["ab\nEND"], "ab", "\n"),
        (["xy", "x"], ["ax", "y"], "a", "x"),  # at one place, the first given
        (["END"], ["ab", EOS], "ab", None),  # the end of turn is no stop string
        (["END"], ["abEN", EOS], "abEN", None),  # nor a stop string's unfinished start
    ],
)
def test_the_final_record_names_the_stop_string_that_ended_the_output(
    vocab, stops, parts, text, stop
):
    s = Script(vocab, stops, None)
    assert s.run(*parts) == text
    assert s.done is not None and s.done.done_reason == "stop" and s.done.stop == stop


def test_a_stop_string_that_cuts_a_whole_document_is_named(vocab):
    s = Script(vocab, ["9", "34"], {"type": "integer"})  # 12 is a whole document
    assert s.run("12", "3", "4", "5", EOS) == "12"
    assert s.done is not None and s.done.stop == "34"
