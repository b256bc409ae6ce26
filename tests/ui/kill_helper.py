"""Run by test_kill.py in its own process: the app, attached to a service, sending one
message and printing how much of the reply is on screen each time the view updates, until the
test kills it."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QApplication

from hearth.ui.app import HearthApp


def main() -> None:
    url, token, prompt = sys.argv[1:4]
    app = QApplication([])
    h = HearthApp(["--server", url, f"--api-key={token}"])  # a key may begin with "-"
    h.chat.update_chat_settings("", {"num_predict": 400, "temperature": 0.0})
    transcript = h.window.chat_page.transcript

    def shown() -> None:
        if transcript.widgets and transcript.widgets[-1].item.role == "assistant":
            print("shown", len(transcript.widgets[-1].body.markdown_source()), flush=True)

    h.chat.conversation.dataChanged.connect(lambda *_: shown())
    h.service.ready.connect(lambda *_: h.chat.send(prompt))
    h.start()
    app.exec()


if __name__ == "__main__":
    main()
