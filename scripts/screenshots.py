#!/usr/bin/env python3
"""Make the PNGs in docs/screenshots/: the main window mid-conversation (light and dark), the
Models page and the Settings page, from a real window under Xvfb.

    .venv/bin/python scripts/screenshots.py            # needs xvfb-run (Debian: xvfb)

The app runs as a user would: it starts its own `hearth serve` (so the Models page shows the
real default model and its memory estimate). The conversation is sample text written into a
throw-away history first, so the pictures show what a longer chat looks like. Not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CODE_ANSWER = """Use the standard library's `csv` module: `DictReader` gives you one dict per \
row, keyed by the header line.

```python
import csv
from pathlib import Path

def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))

rows = read_rows(Path("sales.csv"))
total = sum(float(r["amount"]) for r in rows)
print(f"{len(rows)} rows, total {total:.2f}")
```

A few things worth knowing:

- Open the file with `newline=""`, or quoted fields containing line breaks are split wrongly.
- Every value is a **string**: convert numbers yourself, as `float(r["amount"])` does above.
- For large files, loop over the reader instead of building a list.
"""

FOLLOW_UP = """Yes: pass `delimiter=";"` to the reader.

```python
reader = csv.DictReader(f, delimiter=";")
```

If you don't know the delimiter in advance, `csv.Sniffer().sniff(sample)` can guess it \
from the first few kilobytes of the file."""

OTHER_CHATS = (
    "Plan a weekend in Lisbon",
    "Explain Rust lifetimes like I'm five",
    "Sourdough starter schedule",
    "Haiku about the first snow",
    "Compare SQLite WAL and rollback journal",
)


def seed_history() -> None:
    from hearth.history import ChatStore
    from hearth.history.chat_store import make_title

    store = ChatStore()
    now = time.time()
    for n, title in enumerate(OTHER_CHATS):
        chat = store.create_chat("gemma3:270m")
        store.set_auto_title(chat.id, title)
        q = store.add_message(chat.id, None, "user", title)
        store.add_message(chat.id, q.id, "assistant", "…", model="gemma3:270m")
        store._conn.execute(  # spread the sample chats over the past week
            "UPDATE chats SET updated_at=? WHERE id=?", (now - 86400 * (n + 1) * 1.3, chat.id)
        )
    chat = store.create_chat("gemma3:270m")
    question = "How do I read a CSV file into a list of dicts in Python?"
    store.set_auto_title(chat.id, make_title(question))
    q = store.add_message(chat.id, None, "user", question)
    stats = {
        "eval_count": 187,
        "eval_duration": 4_120_000_000,
        "prompt_eval_count": 38,
        "prompt_tokens": 38,
        "tokens_per_second": 45.4,
        "ttft": 0.21,
        "done_reason": "stop",
    }
    first = store.add_message(chat.id, q.id, "assistant", "Short version: csv.DictReader.")
    store.update_message(first.id, stats={**stats, "eval_count": 9})
    a = store.add_message(chat.id, q.id, "assistant", CODE_ANSWER, model="gemma3:270m")
    store.update_message(a.id, stats=stats)
    q2 = store.add_message(chat.id, a.id, "user", "My file uses semicolons. Does that still work?")
    a2 = store.add_message(chat.id, q2.id, "assistant", FOLLOW_UP, model="gemma3:270m")
    store.update_message(
        a2.id,
        stats={**stats, "eval_count": 74, "prompt_tokens": 262, "tokens_per_second": 44.1},
    )
    store.close()


def shoot(out: Path) -> None:
    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication

    from hearth.app_settings import AppSettings, new_api_key
    from hearth.ui.app import HearthApp
    from hearth.ui.views.main_window import CHAT_PAGE, MODELS_PAGE, SETTINGS_PAGE

    app = QApplication(["hearth"])
    app.setApplicationName("Hearth")
    h = HearthApp([], settings=AppSettings(theme="light"))
    h.start()
    h.window.resize(1320, 900)

    def spin(seconds: float, until=lambda: False) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not until():
            app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)

    spin(180, lambda: h.service.state in ("ready", "failed"))
    if h.service.state != "ready":
        raise SystemExit(f"the engine did not start; see {h.service.log_path}")
    spin(30, lambda: h.models.loaded and all(m.details_loaded for m in h.models.model.models()))
    h.chat.open_chat(h.store.chats()[0].id)
    h.window.chat_page.composer.edit.setPlainText("Can it also write the rows back out, sorted ")

    def grab(name: str) -> None:
        spin(1.0)
        h.window.grab().save(str(out / name))
        print("wrote", out / name)

    def from_the_question() -> None:
        transcript = h.window.chat_page.transcript
        spin(0.5)
        transcript.verticalScrollBar().setValue(transcript.widgets[0].y())

    h.window.show_page(CHAT_PAGE)
    from_the_question()
    grab("main-light.png")
    h.settings_ctrl.set_theme("dark")
    from_the_question()
    grab("main-dark.png")
    h.settings_ctrl.set_theme("light")
    h.window.show_page(MODELS_PAGE)
    h.window.models_page.select_name("gemma3:270m")
    grab("models.png")
    # Show the page as it looks with the API exposed, without binding 0.0.0.0 here.
    shown = AppSettings(**{**vars(h.settings), "api_enabled": True, "api_expose": True})
    shown.api_key = new_api_key()
    h.window.show_page(SETTINGS_PAGE)
    h.window.settings_page.show_settings(
        shown,
        h.window.tr(
            "On: listening on every network interface, port 11434. Clients send the header "
            "“Authorization: Bearer <key>”."
        ),
    )
    grab("settings.png")
    h.shutdown()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    args = p.parse_args()
    if not os.environ.get("DISPLAY") and not os.environ.get("HEARTH_IN_XVFB"):
        if shutil.which("xvfb-run") is None:
            raise SystemExit("xvfb-run is missing: apt-get install xvfb")
        env = dict(os.environ, HEARTH_IN_XVFB="1")
        cmd = ["xvfb-run", "-a", "-s", "-screen 0 1600x1000x24 -dpi 96", sys.executable]
        return subprocess.call([*cmd, __file__, "--out", str(args.out)], env=env)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["QT_QPA_PLATFORM"] = "xcb"
    with tempfile.TemporaryDirectory(prefix="hearth-shots-") as home:
        os.environ["HEARTH_HOME"] = home
        seed_history()
        shoot(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
