"""Crashes on purpose, for tests of what the service does when a runner dies (never set in
use). `HEARTH_TEST_RUNNER_FAULT=POINT` (or `POINT:TEXT`: only runners whose model file's path
contains TEXT; several, comma-separated) makes the runner abort where POINT says, as a native
crash does (SIGABRT, as ggml's abort on a CUDA error):

* `load`: while the model loads (its first progress report);
* `prompt`: once a completion is accepted, before its first line;
* `stream`: after a completion's first two lines;
* `group`: at `load`, after sending SIGTERM to the runner's whole process group (what a
  signal to the group, from a crash handler, a debugger or a supervisor, does).
"""

from __future__ import annotations

import os
import signal
import sys

from .. import env

__all__ = ["fault"]


def fault(point: str, model: str) -> None:
    """Abort the process here when HEARTH_TEST_RUNNER_FAULT names `point` (and `model`)."""
    for entry in env.text("HEARTH_TEST_RUNNER_FAULT").split(","):
        wanted, _, text = entry.strip().partition(":")
        if point == ("load" if wanted == "group" else wanted) and text in model:
            sys.stderr.write(f"hearth runner: aborting at {point} (HEARTH_TEST_RUNNER_FAULT)\n")
            sys.stderr.flush()
            if wanted == "group":
                os.killpg(os.getpgid(0), signal.SIGTERM)
            os.abort()
