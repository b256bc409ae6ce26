"""Talking to the live vision services of test_vision_e2e.py and test_mllama_e2e.py: their API
key, `hearth` run against them, and a runner sequence read to its end with its logprobs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hearth.runner.protocol import CompletionDone, CompletionError, to_wire

from .fakes import LiveServer

API_KEY = "vision-e2e-secret"


def hearth_cli(
    server: LiveServer, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    env = dict(os.environ, HEARTH_HOST=server.url, HEARTH_API_KEY=API_KEY)
    return subprocess.run(
        [sys.executable, "-m", "hearth", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def collect(seq: Any) -> tuple[str, list[dict[str, Any]], CompletionDone]:
    """The text, the logprobs as JSON (as the runner sends them) and the last line."""
    parts, logprobs, done = [], [], None
    while (event := seq.events.get(timeout=120)) is not None:
        assert not isinstance(event, CompletionError), event
        if isinstance(event, CompletionDone):
            done = event
        else:
            parts.append(event.content)
            logprobs += [to_wire(lp) for lp in event.logprobs or []]
    assert done is not None
    return "".join(parts), logprobs, done
