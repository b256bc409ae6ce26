"""The conformance suite: what every architecture plugin must get right, checked on a real file.

    from hearth.plugins.testing import TinyTransformer, run_conformance

    def test_qwen2_conforms(tmp_path):
        run_conformance(TinyTransformer("qwen2", qkv_bias=True, ...), tmp_path, llama_cpp=True)

Checks (each on the engine the runner uses; `CHECKS` names them):

* `parity`: teacher-forced logits and greedy continuations of random prompts equal
  llama.cpp's on the same file (same kernels): top-1 agreement, largest logit difference,
  identical continuations. Needs llama-cpp-python and an architecture llama.cpp knows.
* `batch`: a prompt evaluated in one batch and token by token gives the same logits at every
  position (up to the rounding of batched quantized products).
* `sequences`: several sequences decoding together give bit-identical logits to each alone,
  and prompts sharing a batch give what each gives alone (bit-identical where the engine's
  load report claims batch invariance).
* `shift`: keys shifted in the cache equal keys computed at the new positions: a prompt
  evaluated at positions d.. and shifted down by d continues exactly like the same prompt
  evaluated at 0.. (skipped when the model cannot shift).
* `cache_reuse`: a second turn (first turn plus reply plus new tokens) reuses the cache and
  evaluates only what is new, and gives the logits a fresh evaluation gives.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from ...engine.architecture import Architectures
from ...engine.forward import ForwardEngine
from ...engine.input import PassInput
from ...engine.model import LoadedModel, load_model
from ...engine.prompt_cache import InputCache
from ..registry import default_registry
from .parity import (
    LLAMACPP_LOGITS,
    LlamaCppUnknownArchitectureError,
    compare,
    llamacpp_installed,
    run_oracle,
)
from .tiny import TinyTransformer, write_tiny_model

__all__ = [
    "CHECKS",
    "CheckResult",
    "ConformanceError",
    "ConformanceReport",
    "Tolerances",
    "run_conformance",
]

CHECKS = ("parity", "batch", "sequences", "shift", "cache_reuse")

ModelSource = str | os.PathLike[str] | TinyTransformer | Callable[[Path], object]


class ConformanceError(AssertionError):
    """At least one check failed; the message is the whole report."""


class _Skip(Exception):  # noqa: N818 - a signal
    pass


@dataclass(frozen=True)
class Tolerances:
    """Limits of the numeric checks. Relative ones are shares of the largest |logit|."""

    parity_top1: float = 0.99  # share of positions whose top token is llama.cpp's
    parity_max_diff: float = 0.05  # largest |logit difference| from llama.cpp
    parity_greedy_misses: int = 1  # greedy continuations allowed to differ
    batch: float = 0.02  # batch vs token by token, and a reused cache vs a fresh one
    shift: float = 0.02  # a shifted cache vs the same tokens evaluated at their new positions


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Literal["passed", "failed", "skipped"]
    detail: str


@dataclass
class ConformanceReport:
    architecture: str
    path: Path
    results: list[CheckResult] = field(default_factory=list)

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "failed"]

    def __str__(self) -> str:
        lines = [f"conformance of '{self.architecture}' on {self.path.name}:"]
        lines += [f"  {r.status:7} {r.name}: {r.detail}" for r in self.results]
        return "\n".join(lines)


def run_conformance(
    model: ModelSource,
    tmp_dir: str | os.PathLike[str],
    *,
    registry: Architectures | None = None,
    llama_cpp: bool | None = None,
    checks: Iterable[str] = CHECKS,
    tolerances: Tolerances = Tolerances(),
    threads: int = 2,
    seed: int = 0,
) -> ConformanceReport:
    """Run the checks on one GGUF file and return the report; raise ConformanceError (an
    AssertionError, so pytest shows the report) when any check fails.

    model: a GGUF path, a `TinyTransformer` to write, or a function that writes the file at
        the path it is given. Written files go to `tmp_dir`, as do llama.cpp's results.
    registry: where the architecture is looked up; by default the built-in and installed
        plugins (`hearth.plugins.registry.default_registry()`).
    llama_cpp: True requires parity with llama.cpp, False skips it, None runs it when
        llama-cpp-python is installed and knows the architecture.
    """
    tmp = Path(tmp_dir)
    path = _model_file(model, tmp)
    wanted = list(checks)
    unknown = sorted(set(wanted) - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown checks {unknown}; the checks are {list(CHECKS)}")
    loaded = load_model(path, registry=registry or default_registry(), num_threads=threads)
    report = ConformanceReport(loaded.architecture, path)
    try:
        suite = _Suite(loaded, path, tmp, tolerances, threads, seed)
        for name in wanted:
            report.results.append(suite.run(name, llama_cpp))
    finally:
        loaded.close()
    if report.failed:
        raise ConformanceError(str(report))
    return report


def _model_file(model: ModelSource, tmp: Path) -> Path:
    if isinstance(model, TinyTransformer):
        return write_tiny_model(tmp / f"tiny-{model.architecture}.gguf", model)
    if callable(model):
        path = tmp / "model.gguf"
        model(path)
        return path
    return Path(model)


@dataclass
class _Suite:
    loaded: LoadedModel
    path: Path
    tmp: Path
    tol: Tolerances
    threads: int
    seed: int

    def run(self, name: str, llama_cpp: bool | None) -> CheckResult:
        check: Callable[[], str] = {
            "parity": lambda: self.parity(llama_cpp),
            "batch": self.batch,
            "sequences": self.sequences,
            "shift": self.shift,
            "cache_reuse": self.cache_reuse,
        }[name]
        try:
            return CheckResult(name, "passed", check())
        except _Skip as e:
            return CheckResult(name, "skipped", str(e))
        except AssertionError as e:
            return CheckResult(name, "failed", str(e) or "assertion failed")
        except Exception as e:  # a plugin error (e.g. in its graph): report it with the rest
            return CheckResult(name, "failed", f"raised {type(e).__name__}: {e}")

    # -- helpers ----------------------------------------------------------------------------
    def prompt(self, n: int, salt: int = 0) -> np.ndarray:
        """n random token ids, BOS first when the vocabulary has one."""
        rng = np.random.default_rng(self.seed * 1000 + salt * 7919 + n)
        ids = rng.integers(3, self.loaded.tokenizer.vocab_size, n)
        bos = self.loaded.tokenizer.bos_id
        if bos is not None:
            ids[0] = bos
        return ids.astype(np.int32)

    @contextmanager
    def engine(
        self, num_ctx: int = 256, num_batch: int = 128, parallel: int = 1
    ) -> Iterator[ForwardEngine]:
        engine = ForwardEngine(self.loaded, num_ctx, num_batch, parallel)
        try:
            yield engine
        finally:
            engine.close()

    @staticmethod
    def evaluate(
        engine: ForwardEngine, ids: np.ndarray, start: int, seq: int, every: bool = False
    ) -> np.ndarray:
        """Evaluate `ids` at positions start.. in one pass; logits of the last row (or of
        every row), `[rows, vocab]`."""
        n = len(ids)
        outputs = np.arange(n) if every else np.array([n - 1])
        return engine.forward(PassInput(ids, np.arange(start, start + n), np.full(n, seq), outputs))

    def close(self, ours: np.ndarray, reference: np.ndarray, rel: float, what: str) -> float:
        """Assert |ours - reference| <= rel * max|reference|; returns the largest difference
        as a share of max|reference|."""
        scale = float(np.abs(reference).max()) or 1.0
        worst = float(np.abs(ours - reference).max()) / scale
        assert worst <= rel, f"{what}: differs by {worst:.3g} of max |logit| (limit {rel})"
        return worst

    # -- checks -----------------------------------------------------------------------------
    def parity(self, llama_cpp: bool | None) -> str:
        if llama_cpp is False:
            raise _Skip("not asked for")
        if not llamacpp_installed():
            assert llama_cpp is None, "llama-cpp-python is not installed"
            raise _Skip("llama-cpp-python is not installed")
        lengths, n_greedy = (24, 80, 200, 400), 16
        prompts = [{"ids": self.prompt(n, 1).tolist()} for n in lengths]
        request = {
            "model": str(self.path),
            "n_ctx": 512,
            "threads": self.threads,
            "prompts": prompts,
            "greedy": n_greedy,
            "sample_rows": 8,
        }
        try:
            oracle = run_oracle(LLAMACPP_LOGITS, request, self.tmp)
        except LlamaCppUnknownArchitectureError as e:
            assert llama_cpp is None, f"llama.cpp cannot run the file ({e})"
            raise _Skip(f"llama.cpp does not know it ({e})") from None
        with self.engine(num_ctx=512, num_batch=512) as engine:
            r = compare(engine, oracle, len(prompts), n_greedy, tie=self.tol.batch)
        figures = (
            f"top-1 {r['top1']:.4f} over {r['positions']} positions, max |logit diff| "
            f"{r['max_abs_diff']:.4f}, greedy equal {r['greedy_equal']}/{len(prompts)}"
            f" ({r['greedy_ties']} parting at a near-tie)"
        )
        assert r["top1"] >= self.tol.parity_top1, figures
        assert r["max_abs_diff"] < self.tol.parity_max_diff, figures
        assert r["greedy_equal"] >= len(prompts) - self.tol.parity_greedy_misses, figures
        return figures

    def batch(self) -> str:
        ids = self.prompt(60, 2)
        with self.engine() as engine:
            together = self.evaluate(engine, ids, 0, 0, every=True)
            engine.cache.remove(0, 0)
            alone = np.stack([self.evaluate(engine, ids[i : i + 1], i, 0)[0] for i in range(60)])
        worst = self.close(together, alone, self.tol.batch, "one batch vs token by token")
        return f"60 positions, largest difference {worst:.2g} of max |logit|"

    def sequences(self) -> str:
        lengths, nexts = (9, 40, 70), self.prompt(3, 3)
        prompts = [self.prompt(n, 4) for n in lengths]
        positions = np.array(lengths)
        with self.engine(parallel=3) as engine:
            exact = self.loaded.weights.invariance_report().holds
            alone = [self.evaluate(engine, p, 0, s, every=True) for s, p in enumerate(prompts)]
            decode_alone = []
            for s in range(3):
                decode_alone.append(self.evaluate(engine, nexts[s : s + 1], lengths[s], s)[0])
                engine.cache.remove(s, lengths[s])  # undo the decode step
            decoded = engine.forward(PassInput(nexts, positions, np.arange(3), np.arange(3)))
            for s in range(3):
                engine.cache.remove(s, 0)
            rows = np.concatenate(prompts)
            seqs = np.repeat(np.arange(3), lengths)
            pos = np.concatenate([np.arange(n) for n in lengths])
            mixed = engine.forward(PassInput(rows, pos, seqs, np.arange(len(rows))))
        for s in range(3):
            same = np.array_equal(decoded[s], decode_alone[s])
            assert same, f"sequence {s} decoded with two others differs from it decoded alone"
        ends = np.cumsum(lengths)
        parts = np.split(mixed, ends[:-1])
        for s in range(3):
            if exact:
                same = np.array_equal(parts[s], alone[s])
                assert same, f"sequence {s}'s prompt rows in a shared batch differ from alone"
            else:
                self.close(parts[s], alone[s], 1e-3, f"sequence {s}'s prompt in a shared batch")
        how = "bit-identical" if exact else "within 1e-3 (the load report claims no invariance)"
        return f"3 sequences decoding together bit-identical; prompts in one batch {how}"

    def shift(self) -> str:
        if not self.loaded.model.can_shift():
            raise _Skip("the model cannot shift (prompts are re-evaluated instead)")
        ids, d = self.prompt(40, 5), 37
        t = self.prompt(1, 6)
        with self.engine(parallel=2) as engine:
            self.evaluate(engine, ids, d, 0)  # positions d..d+39
            engine.cache.remove(0, 0, d)  # now at 0..39, keys re-RoPEd by -d
            shifted = self.evaluate(engine, t, len(ids), 0)
            self.evaluate(engine, ids, 0, 1)
            fresh = self.evaluate(engine, t, len(ids), 1)
        worst = self.close(shifted, fresh, self.tol.shift, f"keys shifted by -{d}")
        assert shifted.argmax() == fresh.argmax(), "the shifted cache predicts another token"
        return f"shifted by -{d}: largest difference {worst:.2g} of max |logit|"

    def cache_reuse(self) -> str:
        prompt = self.prompt(30, 7).tolist()
        with self.engine(parallel=2) as engine:
            slots = InputCache(engine.cache, 2, engine.num_ctx)
            slot, keep = slots.acquire(prompt)
            assert keep == 0, f"an empty cache claims to hold {keep} tokens"
            logits = self.evaluate(engine, np.array(prompt), 0, slot.id)[0]
            history = list(prompt)
            for _ in range(8):  # a greedy reply; its last token is sampled, never evaluated
                history.append(int(logits.argmax()))
                tok = np.array(history[-1:])
                logits = self.evaluate(engine, tok, len(history) - 1, slot.id)[0]
            history.append(int(logits.argmax()))
            slot.set(history[:-1])
            slots.release(slot)
            turn = history + self.prompt(6, 8)[1:].tolist()
            again, keep = slots.acquire(turn)
            new = len(turn) - keep
            assert again.id == slot.id, "the second turn did not get the first turn's slot"
            assert new == 6, f"the second turn evaluates {new} tokens, not the 6 new ones"
            reused = self.evaluate(engine, np.array(turn[keep:]), keep, again.id)
            engine.cache.remove(1 - again.id, 0)
            fresh = self.evaluate(engine, np.array(turn), 0, 1 - again.id)
        worst = self.close(reused, fresh, self.tol.batch, "the reused cache")
        return f"{keep} of {len(turn)} tokens reused; vs fresh: {worst:.2g} of max |logit|"
