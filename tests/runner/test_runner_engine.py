"""The runner's one engine interface (hearth.runner.engine) and the loop's input feed
(hearth.runner.feed): both engines implement the interface, nothing outside engine.py asks
which engine it holds, and the batching loop runs any `RunnerEngine` (here one whose passes
are recorded, not computed) while keeping ids and same-batch marks together; the prompt cache
keeps files on disk where the engine keys them."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from recorded_engine import RecordedEngine

import hearth.runner as runner_package
from hearth.engine.prompt_cache import Slot
from hearth.engine.sampling import SamplingOptions
from hearth.runner.disk_cache import PromptCache
from hearth.runner.engine import (
    HearthEngine,
    LlamaCppRunnerEngine,
    RunnerEngine,
    load_engine,
)
from hearth.runner.feed import InputFeed, Inputs
from hearth.runner.loop import BatchLoop
from hearth.runner.protocol import CompletionChunk, CompletionDone, RunnerOptions
from hearth.runner.sequence import Sequence, SequenceSettings

from tiny_models import byte_token

RUNNER = Path(runner_package.__file__).parent


# -- the interface ------------------------------------------------------------------------
def test_both_engines_implement_every_method_of_the_interface():
    for cls in (HearthEngine, LlamaCppRunnerEngine):
        assert issubclass(cls, RunnerEngine)
        assert not cls.__abstractmethods__, f"{cls.__name__} lacks {cls.__abstractmethods__}"


_ENGINE_NAMES = {"EngineKind", "HearthEngine", "LlamaCppRunnerEngine", "ForwardEngine"}


def _engine_specific_uses(path: Path) -> list[str]:
    """What `path` does that only makes sense knowing which engine it holds: the engine
    kinds or classes by name, the engines' own modules, what only one engine has
    (`loaded`, `vision`, the wrapped `native`), `getattr`/`hasattr` probes of it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in ("LLAMACPP", "HEARTH"):
            found.append(f"line {node.lineno}: EngineKind.{node.attr}")
        if isinstance(node, ast.Attribute) and node.attr in ("loaded", "native", "vision"):
            found.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.Name) and node.id in _ENGINE_NAMES:
            found.append(f"line {node.lineno}: {node.id}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and "engine" in ast.unparse(node.args[0])
        ):
            found.append(f"line {node.lineno}: {node.func.id}() on the engine")
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.split(".")[-1] in ("llamacpp", "forward", "model"):
                found.append(f"line {node.lineno}: imports {node.module}")
            if {a.name for a in node.names} & _ENGINE_NAMES:
                found.append(f"line {node.lineno}: imports an engine's name")
    return found


@pytest.mark.parametrize(
    "module", ["core.py", "loop.py", "feed.py", "main.py", "speculation.py", "disk_cache.py"]
)
def test_the_runner_never_asks_which_engine_it_holds(module):
    assert _engine_specific_uses(RUNNER / module) == []


def test_the_check_finds_an_engine_branch(tmp_path):
    """The check above can fail: the branches core.py had are found."""
    old = tmp_path / "old_core.py"
    old.write_text(
        "from .protocol import EngineKind\n"
        "def load(config, engine):\n"
        "    if config.engine == EngineKind.LLAMACPP:\n"
        "        from ..llamacpp import LlamaCppEngine\n"
        "    vision = getattr(engine, 'vision', None)\n"
        "    return self.loaded is None\n"
    )
    assert len(_engine_specific_uses(old)) == 6


def test_an_unknown_engine_is_refused_before_anything_loads():
    with pytest.raises(ValueError, match="unknown engine 'vllm'"):
        load_engine("no-such-file.gguf", RunnerOptions(engine="vllm"))


def test_an_engine_that_sees_no_images_refuses_them_by_the_interface(tok):
    engine = RecordedEngine(tok, byte_token(tok, 65), 16, pipelined=False)
    with pytest.raises(ValueError, match=r"this model \(recorded\) cannot see images"):
        engine.prompt("[img-0] what is it?", [b"png"])


@pytest.mark.parametrize("pipelined", [False, True])
def test_the_loop_runs_any_runner_engine_and_keeps_same_batch_runs_whole(tok, pipelined):
    """Two prompts of 12 inputs, each with a marked run of 5 (inputs 5..9, as an image's
    positions), through batches of 8: no pass splits a run, every prompt input is evaluated
    once in order, and the answer streams, pipelined (placeholders filled) or not."""
    answer = byte_token(tok, ord("A"))
    engine = RecordedEngine(tok, answer, num_batch=8, pipelined=pipelined)
    loop = BatchLoop(engine, pipelined=pipelined)
    assert loop.pipelined is pipelined
    marks = [0] * 12
    marks[5] = 4
    settings = SequenceSettings(sampling=SamplingOptions(temperature=0.0), num_predict=3)
    prompts = [[1, *range(300, 311)], [1, *range(400, 411)]]
    seqs = [Sequence(p, settings, tok, 64, same_batch=marks) for p in prompts]
    loop.start()
    try:
        for seq in seqs:
            loop.submit(seq)
        events = [[*iter(seq.events.get, None)] for seq in seqs]
    finally:
        loop.stop()
    for got in events:
        assert "".join(e.content for e in got if isinstance(e, CompletionChunk)) == "AAA"
        done = got[-1]
        assert isinstance(done, CompletionDone)
        assert done.done_reason == "length" and done.prompt_eval_count == 12
    fed: dict[int, list[int]] = {0: [], 1: []}
    for p in engine.native.passes:  # type: ignore[attr-defined]
        assert len(p.tokens) <= 8
        for slot in (0, 1):
            rows = np.flatnonzero(p.sequences == slot)
            inputs = p.tokens[rows].tolist()
            assert p.positions[rows].tolist() == list(
                range(len(fed[slot]), len(fed[slot]) + len(rows))
            )
            fed[slot] += inputs
            covered = set(range(len(fed[slot]) - len(inputs), len(fed[slot])))
            run = set(range(5, 10))  # the marked run lies wholly inside this pass or outside
            assert run <= covered or not run & covered
    # Each prompt, then two answers (the last is never evaluated); pipelined, a placeholder
    # planned for the token that ended the sequence may be computed unfilled.
    assert sorted(f[:14] for f in fed.values()) == sorted(p + [answer] * 2 for p in prompts)
    assert all(f[14:] in ([], [0]) for f in fed.values())


# -- the prompt cache on disk, through the interface ----------------------------------------
class _KeyedEngine(RecordedEngine):
    def disk_cache_key(self, options: RunnerOptions) -> dict[str, Any]:
        return {"engine": "recorded", "num_ctx": self.num_ctx}


def test_the_prompt_cache_keeps_files_on_disk_only_where_the_engine_keys_them(tok, tmp_path):
    model = tmp_path / "model.gguf"  # not a store blob: its digest is read from the file
    model.write_bytes(b"not really a model")
    folder = str(tmp_path / "prompt-cache")
    plain = RecordedEngine(tok, 65, 8, pipelined=False)
    unkeyed = PromptCache(plain, str(model), RunnerOptions(), folder=folder, cap_bytes=1 << 20)
    assert unkeyed.ready.is_set() and unkeyed.disk is None
    off = PromptCache(_KeyedEngine(tok, 65, 8, pipelined=False), str(model), RunnerOptions())
    assert off.ready.is_set() and off.disk is None  # no folder: no disk
    keyed = PromptCache(
        _KeyedEngine(tok, 65, 8, pipelined=False),
        str(model),
        RunnerOptions(),
        folder=folder,
        cap_bytes=1 << 20,
    )
    assert keyed.ready.wait(30)
    assert keyed.disk is not None and keyed.slots.disk is keyed.disk
    digest = hashlib.sha256(b"not really a model").hexdigest()
    assert keyed.disk.settings["model"] == digest
    assert (keyed.disk.settings["engine"], keyed.disk.settings["num_ctx"]) == ("recorded", 64)
    keyed.close()


# -- the feed ------------------------------------------------------------------------------
def test_inputs_keep_ids_and_marks_together():
    pending = Inputs([1, -5, -6, -7, 2, 3], [0, 2, 0, 0, 0, 0])
    assert pending.group_start(2) == 1 and pending.group_start(4) == 4
    head = pending.take(4)
    assert (head.ids, head.marks) == ([1, -5, -6, -7], [0, 2, 0, 0])
    assert (pending.ids, pending.marks) == ([2, 3], [0, 0])
    pending.prepend(Inputs([9, -8], [1, 0]))
    pending.append_token(4)
    assert (pending.ids, pending.marks) == ([9, -8, 2, 3, 4], [1, 0, 0, 0, 0])
    with pytest.raises(ValueError):
        Inputs([1, 2], [0])


def test_a_feed_keeps_in_the_cache_only_what_was_sent(tok):
    seq = Sequence([1, 2, 3], SequenceSettings(), tok, 64)
    slot = Slot(0)
    slot.set([1, 2, 3])
    feed = InputFeed(seq, slot, Inputs([]))
    feed.add_sampled(7)  # generated, evaluated, its text never sent
    slot.extend(feed.pending.take(1).ids, [0])
    assert feed.fed == 1 and feed.tokens_to_keep() == 3
    slot.extend(feed.plan_placeholder().ids, [0])
    assert feed.placeholder_planned and slot.tokens == [1, 2, 3, 7, 0]
    feed.fill_placeholder(8)
    assert slot.tokens == [1, 2, 3, 7, 8] and not feed.placeholder_planned
    slot.extend(feed.plan_placeholder().ids, [0])
    feed.drop_placeholder()  # the sequence ended before this token existed
    assert slot.tokens == [1, 2, 3, 7, 8] and feed.fed == 2
    assert feed.tokens_to_keep() == 3
