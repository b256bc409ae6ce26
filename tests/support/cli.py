"""`hearth` as a user runs it: a subprocess of this checkout, optionally pointed at a live
service (tests/cli, and the live service tests that check what the CLI prints)."""

from __future__ import annotations

import os
import subprocess
import sys

from support.paths import REPO


def hearth(*args: str, server=None, env: dict[str, str] | None = None,
           timeout: int = 300) -> subprocess.CompletedProcess:  # fmt: skip
    full = dict(os.environ, **(env or {}))
    if server is not None:
        full["HEARTH_HOST"] = server.url.removeprefix("http://")
        full["HEARTH_HOME"] = str(server.home)
    return subprocess.run([sys.executable, "-m", "hearth", *args], capture_output=True,
                          text=True, env=full, timeout=timeout, cwd=REPO)  # fmt: skip
