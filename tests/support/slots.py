"""A KV cache that records the calls the prompt cache's slots make (`InputCache`), for the
slot tests in tests/engine and the batching tests in tests/runner."""

from __future__ import annotations

from hearth.engine.kvcache import MAX_POS, ShiftNotSupportedError


class RecordingCache:
    """The three calls InputCache makes; `shift_fails` = the model has no shift function."""

    def __init__(self, shift_fails: bool = False, resumable: bool = True) -> None:
        self.calls: list[tuple] = []
        self.shift_fails = shift_fails
        self.resumable = resumable

    def can_resume(self, seq: int, pos: int) -> bool:
        self.calls.append(("can_resume", seq, pos))
        return self.resumable

    def remove(self, seq: int, begin: int, end: int = MAX_POS) -> None:
        self.calls.append(("remove", seq, begin, end))
        if self.shift_fails and end != MAX_POS:
            raise ShiftNotSupportedError()

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        self.calls.append(("copy_prefix", src, dst, length))
