"""Issue 14 as a new user tries it: a GGUF of an architecture no Hearth plugin registers (a
tiny random ERNIE 4.5, built with transformers and converted by llama.cpp's converter) dragged
onto the window of the desktop app (offscreen) against a real `hearth serve`. It imports,
the Models page says it runs on llama.cpp and why, and a chat message gets a reply (the
service's own greedy answer to the same chat)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from hearth.history.records import DONE
from tests.convert.chat_models import tiny_chat_gguf

from support.ui import drop_file, service_api

pytestmark = pytest.mark.slow

OPTIONS = {"num_predict": 8, "temperature": 0.0, "repeat_penalty": 1.0}
QUESTION = "Hello world"
WHY = "llama.cpp (no Hearth plugin for architecture 'ernie4_5')"


@pytest.fixture(scope="module")
def ernie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_chat_gguf(tmp_path_factory.mktemp("ernie-gui"), "ernie4_5")


def _drop_onto_window(qtbot, app, path: Path) -> str:
    """Drag `path` over the message box and let go; the imported model's name."""
    with qtbot.waitSignal(app.models.import_finished, timeout=120_000) as done:
        drop_file(app, path, "Drop to import this model")
    name, ok, message = done.args
    assert ok, message
    return str(name)


def test_a_dropped_ernie_runs_on_llamacpp_and_chats(qtbot, make_app, real_service, ernie):
    app = make_app(real_service["url"], real_service["token"])
    name = _drop_onto_window(qtbot, app, ernie)
    try:
        qtbot.waitUntil(
            lambda: bool(app.models.info(name) and app.models.info(name).details_loaded)
        )
        info = app.models.info(name)
        assert info.architecture == "ernie4_5" and info.engine == WHY
        assert "completion" in info.capabilities
        app.window.models_page.select_name(name)
        arch_row = app.window.models_page.d_fields["arch"].text()
        assert arch_row == f"ernie4_5 — {WHY}"

        app.chat.new_chat(name)
        app.chat.update_chat_settings("", dict(OPTIONS))
        edit = app.window.chat_page.composer.edit
        edit.setFocus()
        edit.setPlainText(QUESTION)
        with qtbot.waitSignal(app.chat.reply_finished, timeout=120_000):
            qtbot.keyClick(edit, Qt.Key.Key_Return)
        reply = app.chat.conversation.items()[-1]
        assert reply.state == DONE and reply.stats["eval_count"] >= 1
        same = service_api(
            real_service,
            "/api/chat",
            {
                "model": name,
                "messages": [{"role": "user", "content": QUESTION}],
                "options": OPTIONS,
                "stream": False,
            },
        )
        assert reply.content == same["message"]["content"] and reply.content
    finally:
        app.models.delete(name)
        qtbot.waitUntil(lambda: name not in app.models.names(), timeout=10_000)
