"""A `RunnerEngine` whose passes are recorded, not computed (the runner's loop tests): every
output row favours one `answer` token, as logits or, for a greedy pass (`PassInput.greedy`),
as the engine's pick; `fail_at` makes the pass of that number (from 1) raise."""

from __future__ import annotations

from typing import Any

import numpy as np

from hearth.engine.memory_use import MemoryUse
from hearth.runner.engine import PassInput, RunnerEngine

__all__ = ["RecordedEngine"]


class _NoCache:
    """The cache operations the prompt cache calls, doing nothing."""

    def remove(self, seq: int, begin: int, end: int = 2**31 - 1) -> None:
        pass

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        pass

    def can_resume(self, seq: int, pos: int) -> bool:
        return True


class _Recorded:
    """Passes that record their inputs (module docstring)."""

    pooling = "last"

    def __init__(self, vocab: int, answer: int, num_batch: int, fail_at: int | None) -> None:
        self.num_ctx, self.num_batch, self.parallel = 64, num_batch, 2
        self.memory = MemoryUse(weights=1, cache=2, graph=3)
        self.cache = _NoCache()
        self.vocab, self.answer = vocab, answer
        self.fail_at = fail_at
        self.passes: list[PassInput] = []

    def plan(self, inputs: PassInput) -> PassInput:
        return inputs

    def run(self, planned: PassInput, on_started: Any = None) -> np.ndarray:
        if on_started is not None:
            on_started()
        # Its tokens as computed (placeholders filled): a copy, the loop may reuse the array.
        self.passes.append(
            PassInput(planned.tokens.copy(), planned.positions, planned.sequences, planned.outputs)
        )
        if len(self.passes) == self.fail_at:
            raise RuntimeError(f"pass {self.fail_at} broke")
        if planned.greedy:
            return np.full(len(planned.outputs), self.answer, np.int32)
        logits = np.zeros((len(planned.outputs), self.vocab), np.float32)
        logits[:, self.answer] = 1.0
        return logits

    def forward(self, inputs: PassInput) -> np.ndarray:
        return self.run(self.plan(inputs))

    def replaces_state(self, token: int) -> bool:
        return False

    def close(self) -> None:
        pass


class RecordedEngine(RunnerEngine):
    def __init__(
        self, tok: Any, answer: int, num_batch: int, pipelined: bool, fail_at: int | None = None
    ) -> None:
        native = _Recorded(tok.vocab_size, answer, num_batch, fail_at)
        super().__init__(native, tok, "recorded", 0)
        self.recorded = native
        self._pipelined = pipelined

    @property
    def can_pipeline(self) -> bool:
        return self._pipelined

    @property
    def spare_core(self) -> bool:
        return True

    @property
    def sees_images(self) -> bool:
        return False

    def _lay_out(self, text: str, images: list[bytes]) -> tuple[list[int], list[int]]:
        raise AssertionError("never called for an engine that sees no images")

    def devices(self) -> dict[str, dict[str, int]]:
        return {"CPU": {"weights": 1, "cache": 2, "graph": 3}}

    @property
    def invariance(self) -> None:
        return None
