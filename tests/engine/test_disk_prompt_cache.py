"""The prompt cache on disk (`engine/disk_prompt_cache.py`, the caches' snapshot/restore, the
slots' save and load): a runner closed and started again loads a saved prefix instead of
evaluating it, with the numbers a runner without the disk cache gives; the size cap removes
the least recently used file; damaged and foreign files are ignored with a log line."""

from __future__ import annotations

import logging
import struct
import threading
from pathlib import Path

import ggml
import numpy as np
import pytest

import hearth
from hearth.engine.disk_prompt_cache import DiskPromptCache
from hearth.engine.kvcache import Causal, SequenceState
from hearth.engine.ml import DType
from hearth.engine.ml.reference import NumpyBackend
from hearth.engine.prompt_cache import InputCache
from hearth.runner.core import Runner, RunnerConfig
from hearth.runner.protocol import (
    CompletionDone,
    CompletionOptions,
    CompletionRequest,
)

from support.runner import read_events

pytestmark = pytest.mark.slow


def collect(seq) -> tuple[list, CompletionDone]:
    """The logprobs of every generated token, and the final record."""
    pieces, done = read_events(seq)
    logprobs = [
        (lp.token, lp.logprob, [(t.token, t.logprob) for t in lp.top_logprobs or []])
        for p in pieces
        for lp in p.logprobs or []
    ]
    return logprobs, done


def ask(runner: Runner, tokens: list[int], n: int = 8) -> tuple[list, CompletionDone]:
    options = CompletionOptions(temperature=0, repeat_penalty=1.0, num_predict=n)
    request = CompletionRequest(tokens=tokens, options=options, logprobs=True, top_logprobs=5)
    return collect(runner.completion(request))


def start(model: Path, cache: Path | None, cap: int = 1 << 30, **options) -> Runner:
    settings = {"num_ctx": 512, "parallel": 2, "num_batch": 32, "threads": 2, **options}
    config = RunnerConfig(
        str(model),
        prompt_cache_dir=str(cache) if cache else None,
        prompt_cache_bytes=cap,
        **settings,
    )
    runner = Runner(config)
    assert runner.prompt_cache.ready.wait(60)
    return runner


def files(cache: Path) -> list[Path]:
    return sorted(cache.glob("*/*.kv"))


def tokens(seed: int, n: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [1, *rng.integers(3, 250, n - 1).tolist()]


MODELS = {
    "llama": ("tiny_llama_path", {}),
    "llama-flash-q8": ("tiny_llama_path", {"flash_attention": True, "kv_type": "q8_0"}),
    # window 16: the 200-token prompt is far longer than the window
    "gemma3": ("tiny_gemma3_path", {}),
}


@pytest.mark.parametrize("which", list(MODELS))
def test_a_restarted_runner_loads_the_saved_prompt_and_gives_a_fresh_evaluation_s_bits(
    which, request, tmp_path
):
    fixture, options = MODELS[which]
    model = request.getfixturevalue(fixture)
    cache = tmp_path / "cache"
    prompt = tokens(1, 200)
    first = start(model, cache, **options)
    _, done = ask(first, prompt, n=3)
    first.close()  # unloading saves the slot
    assert len(files(cache)) == 1
    reply = done.context[len(prompt)]
    more = [t for t in tokens(2, 24) if t != reply][1:21]  # 20 new tokens, not the reply's
    follow = prompt + more

    second = start(model, cache, **options)
    loaded, done2 = ask(second, follow)
    second.close()
    fresh_runner = start(model, None, **options)
    fresh, done3 = ask(fresh_runner, follow)
    fresh_runner.close()

    assert done2.prompt_eval_count == len(more)  # only the new tokens
    assert done2.prompt_cached == len(prompt)
    assert done3.prompt_eval_count == len(follow)
    assert done2.context == done3.context  # greedy: the same tokens
    assert loaded == fresh  # and the same logprobs, bit for bit


@pytest.mark.parametrize("which", ["llama", "gemma3"])
def test_a_follow_up_turn_after_a_restart_equals_the_turn_without_a_restart(
    which, request, tmp_path
):
    """The reply's tokens were evaluated one at a time while generating: the file holds those
    bits too, so the follow-up equals the one a runner that kept them in memory gives."""
    fixture, options = MODELS[which]
    model = request.getfixturevalue(fixture)
    cache = tmp_path / "cache"
    prompt = tokens(3, 150)
    runner = start(model, cache, **options)
    _, done = ask(runner, prompt, n=12)
    runner.close()
    follow = done.context + tokens(4, 15)[1:]

    restarted = start(model, cache, **options)
    after, done2 = ask(restarted, follow)
    restarted.close()
    kept = start(model, None, **options)
    ask(kept, prompt, n=12)
    in_memory, done3 = ask(kept, follow)
    kept.close()

    assert done2.prompt_eval_count == done3.prompt_eval_count < 20
    assert done2.context == done3.context
    assert after == in_memory


def test_a_slot_reused_for_another_prompt_is_saved_and_loaded_back(tiny_llama_path, tmp_path):
    cache = tmp_path / "cache"
    runner = start(tiny_llama_path, cache, parallel=1)
    a, b = tokens(5, 120), tokens(6, 120)
    ask(runner, a, n=2)
    ask(runner, b, n=2)  # the only slot now holds b: a was saved
    assert runner.prompt_cache.disk is not None and runner.prompt_cache.disk.flush(30)
    assert len(files(cache)) == 1
    _, done = ask(runner, a + tokens(7, 11)[1:], n=2)
    assert done.prompt_eval_count == 10  # a came back from the disk
    runner.close()


def test_a_truncated_file_is_ignored_with_a_log_line_and_the_answer_is_right(
    tiny_gemma3_path, tmp_path, caplog
):
    cache = tmp_path / "cache"
    prompt = tokens(8, 160)
    runner = start(tiny_gemma3_path, cache)
    ask(runner, prompt, n=2)
    runner.close()
    (saved,) = files(cache)
    saved.write_bytes(saved.read_bytes()[: saved.stat().st_size // 2])
    follow = prompt + tokens(9, 9)[1:]
    with caplog.at_level(logging.WARNING, logger="hearth.prompt_cache"):
        again = start(tiny_gemma3_path, cache)
        answer, done = ask(again, follow)
        again.close()
    assert f"prompt cache file {saved} ignored and removed: truncated" in caplog.text
    fresh_runner = start(tiny_gemma3_path, None)
    fresh, fresh_done = ask(fresh_runner, follow)
    fresh_runner.close()
    assert done.prompt_eval_count == len(follow)  # evaluated, not loaded
    assert done.context == fresh_done.context and answer == fresh


# -- the files themselves --------------------------------------------------------------------


def _state(seed: int, n: int = 64) -> SequenceState:
    rng = np.random.default_rng(seed)
    arrays = {
        "pos": np.arange(n, dtype=np.int32),
        "k0": rng.integers(0, 255, (n, 128), dtype=np.uint8),
    }
    return SequenceState(arrays, 0)


def _disk(root: Path, cap: int = 1 << 30, **settings) -> DiskPromptCache:
    return DiskPromptCache(root, {"model": "m", **settings}, cap, min_tokens=4)


def test_a_saved_state_reads_back_exactly_and_serves_the_longest_prefix(tmp_path):
    disk = _disk(tmp_path)
    disk.save(list(range(100, 164)), _state(1))
    disk.save(list(range(100, 132)) + [7] * 32, _state(2))
    assert disk.flush(30)
    again = _disk(tmp_path)  # a new process reads the folder
    entry, n = again.best(list(range(100, 150)) + [9], limit=51)
    assert n == 50 and list(entry.tokens) == list(range(100, 164))
    state = again.load(entry)
    assert state is not None and state.resume_from == 0
    for name, a in _state(1).arrays.items():
        assert np.array_equal(state.arrays[name], a)
    assert again.best([5, 6, 7, 8, 9], limit=5) is None
    disk.close()
    again.close()


def test_saving_returns_at_once_and_the_writer_thread_writes(tmp_path, monkeypatch):
    disk = _disk(tmp_path)
    gate = threading.Event()
    writers: list[str] = []
    write = DiskPromptCache._write

    def held_write(self, tokens, state):
        writers.append(threading.current_thread().name)
        gate.wait(30)
        write(self, tokens, state)

    monkeypatch.setattr(DiskPromptCache, "_write", held_write)
    disk.save(list(range(64)), _state(1))  # returns while the write is held
    assert files(tmp_path) == [] and not disk.flush(0.2)
    gate.set()
    assert disk.flush(30) and len(files(tmp_path)) == 1
    assert writers == ["prompt-cache"] and threading.current_thread().name != "prompt-cache"
    disk.close()


def test_the_cap_removes_the_least_recently_used_file(tmp_path):
    probe = _disk(tmp_path / "probe")
    probe.save([1] * 64, _state(0))
    assert probe.flush(30)
    size = files(tmp_path / "probe")[0].stat().st_size
    probe.close()
    root = tmp_path / "cache"
    disk = _disk(root, cap=2 * size + size // 2)  # room for two files
    a, b, c = ([k] * 64 for k in (1, 2, 3))
    disk.save(a, _state(1))
    assert disk.flush(30)
    disk.save(b, _state(2))
    assert disk.flush(30)
    found = disk.best(a + [0], limit=64)
    assert found is not None and disk.load(found[0]) is not None  # a is used: b is older now
    disk.save(c, _state(3))
    assert disk.flush(30)
    kept = {tuple(e.tokens[:1]) for e in disk.entries}
    assert kept == {(1,), (3,)}
    assert len(files(root)) == 2 and sum(p.stat().st_size for p in files(root)) <= disk.cap_bytes
    disk.close()


def test_a_longer_save_replaces_the_files_it_serves_for(tmp_path):
    disk = _disk(tmp_path)
    disk.save(list(range(10, 40)), _state(1, 30))
    assert disk.flush(30)
    disk.save(list(range(10, 74)), _state(2))
    assert disk.flush(30)
    assert [len(e.tokens) for e in disk.entries] == [64] and len(files(tmp_path)) == 1
    disk.close()


def test_foreign_and_damaged_files_are_ignored_with_a_log_line(tmp_path, caplog):
    disk = _disk(tmp_path)
    disk.save(list(range(64)), _state(1))
    assert disk.flush(30)
    disk.close()
    (saved,) = files(tmp_path)
    data = saved.read_bytes()
    other = _disk(tmp_path, kv_type="q8_0")  # other settings: another folder
    assert other.folder != disk.folder and other.entries == []
    other.close()
    # the same file under another key's folder, another version, a flipped payload byte
    moved = other.folder / saved.name
    moved.write_bytes(data)
    version = saved.with_name("v.kv")
    version.write_bytes(data[:8] + struct.pack("<I", 99) + data[12:])
    with caplog.at_level(logging.WARNING, logger="hearth.prompt_cache"):
        assert _disk(tmp_path, kv_type="q8_0").entries == []
        assert len(_disk(tmp_path).entries) == 1  # the good file; v.kv is ignored
        saved.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        reread = _disk(tmp_path)
        entry = next(e for e in reread.entries if e.path == saved)
        assert reread.load(entry) is None
    text = caplog.text
    assert f"{moved} ignored: written for another model or other cache settings" in text
    assert f"{version} ignored: format version 99, this Hearth reads 1" in text
    assert f"{saved} ignored and removed: checksum mismatch" in text
    assert moved.exists() and version.exists() and not saved.exists()


@pytest.mark.parametrize("changed", ["hearth", "ggml_python", "ggml", "ggml_commit"])
def test_a_file_written_by_another_hearth_or_ggml_version_is_never_loaded(
    tmp_path, monkeypatch, changed
):
    from hearth.engine import disk_prompt_cache

    real = dict(disk_prompt_cache.software_versions())
    assert real["hearth"] == hearth.__version__ and real["ggml_python"] == ggml.__version__
    prompt = list(range(100, 164))
    disk = _disk(tmp_path)
    disk.save(prompt, _state(1))
    assert disk.flush(30)
    disk.close()
    same = _disk(tmp_path)  # the same versions: the file is found and read
    found = same.best(prompt, limit=64)
    assert found is not None and same.load(found[0]) is not None
    same.close()
    monkeypatch.setattr(
        disk_prompt_cache, "software_versions", lambda: {**real, changed: real[changed] + "+1"}
    )
    upgraded = _disk(tmp_path)  # the same settings, another version: another key
    assert upgraded.key != disk.key and upgraded.entries == []
    assert upgraded.best(prompt, limit=64) is None
    # the old file, even moved into the new key's folder, is refused (its header says so)
    (old,) = files(tmp_path)
    (upgraded.folder / old.name).write_bytes(old.read_bytes())
    assert _disk(tmp_path).entries == []
    upgraded.close()


# -- what a slot saves -----------------------------------------------------------------------


class _Recorder(Causal):
    """A causal cache that records what the slots snapshot."""

    def __init__(self) -> None:
        super().__init__()
        self.snapshots: list[tuple[int, int]] = []
        self.init(NumpyBackend(), DType.F16, 1, 512, 32)

    def snapshot(self, seq: int, length: int) -> SequenceState | None:
        self.snapshots.append((seq, length))
        return SequenceState({"x": np.zeros(length, np.int32)}, 0)


def test_a_slot_saves_only_its_prefix_before_the_first_image(tmp_path):
    cache = _Recorder()
    slots = InputCache(cache, 1, 512, disk=_disk(tmp_path))
    image = [-1] * 10  # an image's placeholder ids, one same-batch run
    prompt = list(range(40)) + image + list(range(100, 140))
    marks = [0] * 40 + [9] + [0] * 49
    slot, _ = slots.acquire(prompt, marks=marks)
    slot.extend(prompt, marks)  # evaluated (the loop's part)
    slots.release(slot)
    slots.acquire(list(range(500, 600)))  # another prompt takes the slot: it is saved
    assert cache.snapshots == [(0, 40)]
    assert slots.disk is not None and slots.disk.flush(30)
    (entry,) = slots.disk.entries
    assert list(entry.tokens) == list(range(40))


# -- images: the disk holds the prefix before the first one ---------------------------------


@pytest.fixture(scope="module")
def tiny_mllama_path(tmp_path_factory) -> Path:
    from hearth_mllama.testing import TinyMllamaVision, tiny_mllama
    from tests.plugins.mllama_checkpoint import convert_tiny

    spec = TinyMllamaVision(vocab=300, text_layers=5, cross_attention_layers=(1, 3))
    path = tmp_path_factory.mktemp("mllama") / "tiny-mllama.gguf"
    return convert_tiny(tiny_mllama(spec), tmp_path_factory.mktemp("mllama-hf"), path)


def test_a_prompt_with_an_image_saves_and_loads_the_text_before_it(tiny_mllama_path, tmp_path):
    """mllama: the text before the image is saved (its cross-attention layers hold nothing
    for it); the image's positions and what follows are evaluated again after a restart."""
    import base64

    from hearth_mllama.testing import random_png

    cache = tmp_path / "cache"
    words = " ".join(f"note {i} about the harbour" for i in range(12))
    prompt = f"<|start_header_id|>user<|end_header_id|>\n\n{words}\n[img-0]What is it?"
    image = base64.b64encode(random_png(40, 60, 1)).decode()
    options = CompletionOptions(temperature=0, repeat_penalty=1.0, num_predict=6)
    request = CompletionRequest(
        prompt=prompt, images=[image], options=options, logprobs=True, top_logprobs=3
    )
    runner = start(tiny_mllama_path, cache)
    ids, _ = runner._prompt_with_images(prompt, [image])
    before = next(i for i, t in enumerate(ids) if t < 0)  # the image's first position
    collect(runner.completion(request))
    runner.close()
    assert len(files(cache)) == 1 and before >= 32

    again = start(tiny_mllama_path, cache)
    loaded, done = collect(again.completion(request))
    disk = again.prompt_cache.disk
    again.close()
    assert disk is not None
    (held,) = disk.entries
    assert list(held.tokens) == ids[:before]  # no image position on disk
    assert done.prompt_cached == before and done.prompt_eval_count == len(ids) - before
    fresh_runner = start(tiny_mllama_path, None)
    fresh, fresh_done = collect(fresh_runner.completion(request))
    fresh_runner.close()
    assert done.context == fresh_done.context and loaded == fresh


# -- the causal cache's host copy ------------------------------------------------------------


@pytest.mark.parametrize("permuted_v", [True, False])
@pytest.mark.parametrize("window", [0, 4])
def test_a_sequence_copied_to_the_host_comes_back_in_another_slot_byte_for_byte(permuted_v, window):
    """Saved from sequence 1, restored as sequence 0: the same positions at the same offsets
    of its region, K and V rows (permuted V gathered per cell) byte for byte; a sliding
    window keeps only what it held, and says where a restored copy can resume."""
    from hearth.engine.input import Batch
    from hearth.engine.ml import CacheConfig

    backend = NumpyBackend()
    cache = Causal(window=window, memory=window + 2 if window else None)
    cache.set_config(CacheConfig(padding=4, permuted_v=permuted_v, mask_dtype=DType.F32))
    cache.init(backend, DType.F16, 2, 32, 8)
    rng = np.random.default_rng(0)

    def fill(seq: int, start: int, n: int) -> None:
        ctx = backend.new_context()
        try:
            pos = np.arange(start, start + n, dtype=np.int32)
            batch = Batch(
                ctx.from_numpy(np.zeros(n, np.int32)),
                ctx.from_numpy(pos),
                ctx.from_numpy(pos),
                pos,
                np.full(n, seq, np.int32),
                pos,
            )
            cache.start_forward(ctx, batch)
            for layer in (0, 1):
                cache.set_layer(layer)
                k = ctx.from_numpy(rng.standard_normal((n, 2, 4)).astype(np.float32))
                v = ctx.from_numpy(rng.standard_normal((n, 2, 4)).astype(np.float32))
                cache.put(ctx, k, v)
            ctx.compute()
        finally:
            ctx.close()

    for start in range(0, 12, 4):  # three passes: a window lets early cells go
        fill(1, start, 4)
    fill(0, 0, 3)  # sequence 0 holds something else
    state = cache.snapshot(1, 12)
    assert state is not None
    held = cache.positions(1)
    assert sorted(state.arrays["pos"]) == list(held)  # in cell order
    assert state.resume_from == (held[0] + window - 1 if window and held[0] > 0 else 0)
    assert not cache.restore(0, state)  # sequence 0 is not empty
    cache.remove(0, 0)
    assert cache.restore(0, state)
    assert list(cache.positions(0)) == list(held)
    again = cache.snapshot(0, 12)
    assert again is not None
    for name, a in state.arrays.items():
        assert np.array_equal(again.arrays[name], a), name
    assert cache.snapshot(1, 12) is not None  # the source is untouched
    broken = SequenceState({**state.arrays, "k0": state.arrays["k0"][:, :-1]}, 0)
    cache.remove(0, 0)
    assert not cache.restore(0, broken) and len(cache.positions(0)) == 0
