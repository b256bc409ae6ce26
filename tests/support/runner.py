"""Reading a runner's sequence to its end, for the tests that drive `hearth.runner` in
process (tests/runner)."""

from __future__ import annotations

from hearth.runner.protocol import CompletionDone, CompletionError


def collect(seq) -> tuple[str, CompletionDone]:
    parts, done = [], None
    while (event := seq.events.get(timeout=600)) is not None:
        if isinstance(event, CompletionError):
            raise RuntimeError(event.error)
        if isinstance(event, CompletionDone):
            done = event
        else:
            parts.append(event.content)
    assert done is not None
    return "".join(parts), done
