"""`hearth.ui.app.main`, as `hearth` runs it: the window opens, the app starts its own engine,
and a first run opens a chat on the default model."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from hearth.ui import app as ui

def check():
    qapp = QApplication.instance()
    win = next(w for w in qapp.topLevelWidgets() if type(w).__name__ == "MainWindow")
    page = win.chat_page
    print("visible", win.isVisible(), flush=True)
    print("model", page.model_box.currentText() or page.model_box.placeholderText(), flush=True)
    print("status", win.sidebar.status.text(), flush=True)
    if "Engine ready" in win.sidebar.status.text():
        qapp.quit()
    else:
        QTimer.singleShot(500, check)

qapp = QApplication(["hearth"])  # main() uses the running one
QTimer.singleShot(300, check)
sys.exit(ui.main([]))
"""


@pytest.mark.slow
def test_main_opens_the_window_and_a_first_chat_on_the_default_model(_ui_home):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=180, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "visible True"  # shown before the engine was ready
    assert "Engine ready" in lines[-1]
    assert "model gemma3:270m" in lines
    assert (_ui_home / "chats.db").exists()


def test_chats_from_a_newer_hearth_are_refused_with_a_sentence(_ui_home):
    """The window does not open over a history it cannot read; the file is left as it was."""
    import sqlite3

    _ui_home.mkdir(parents=True, exist_ok=True)
    db = _ui_home / "chats.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version=999")
    conn.close()
    before = db.read_bytes()
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=os.pathsep.join(sys.path))
    code = "from hearth.ui import app; raise SystemExit(app.main(['--smoke-test']))"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env
    )
    assert proc.returncode == 1, proc.stderr
    assert f"hearth: {db} was written by a newer Hearth (schema 999)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert db.read_bytes() == before
