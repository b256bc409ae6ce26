"""Reading a runner's sequence to its end, for the tests that drive `hearth.runner` in
process (tests/runner, tests/engine)."""

from __future__ import annotations

from typing import Any

from hearth.runner.protocol import CompletionDone, CompletionError


def read_events(seq: Any) -> tuple[list[Any], CompletionDone]:
    """Every streamed piece of `seq` (its content and logprobs) and its final record; a
    CompletionError raises RuntimeError with its sentence."""
    pieces, done = [], None
    while (event := seq.events.get(timeout=600)) is not None:
        if isinstance(event, CompletionError):
            raise RuntimeError(event.error)
        if isinstance(event, CompletionDone):
            done = event
        else:
            pieces.append(event)
    assert done is not None
    return pieces, done


def collect(seq: Any) -> tuple[str, CompletionDone]:
    """The generated text and the final record."""
    pieces, done = read_events(seq)
    return "".join(p.content for p in pieces), done
