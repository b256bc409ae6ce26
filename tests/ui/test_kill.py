"""Killing the app mid-stream loses nothing that was on screen; the reply is kept and marked
interrupted when the app starts again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hearth.history import ChatStore
from hearth.history.records import INTERRUPTED

HELPER = Path(__file__).with_name("kill_helper.py")


@pytest.mark.slow
def test_kill_during_streaming_keeps_the_partial_reply(real_service, _ui_home):
    proc = subprocess.Popen(
        [sys.executable, str(HELPER), real_service["url"], real_service["token"], "Tell a story."],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ),
    )
    shown = 0
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("shown "):
            shown = max(shown, int(line.split()[1]))
            if shown >= 20:  # a few words are on screen: pull the plug
                os.kill(proc.pid, signal.SIGKILL)
                break
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "the app ended before it was killed"
    assert shown >= 20

    store = ChatStore(_ui_home / "chats.db")  # as the next start of the app opens it
    try:
        assert store.recovered == 1
        chat = store.chats()[0]
        reply = store.path(chat.id)[-1]
        assert reply.role == "assistant" and reply.state == INTERRUPTED
        assert len(reply.content) >= shown  # everything shown was already committed
    finally:
        store.close()
