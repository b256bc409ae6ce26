"""Three things a new user hit: a model created outside the window appears without Refresh
(and a deleted one goes), the first-run offer of a chat model goes once one is installed, and
a chat's automatic title is set once, from its first question."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from stub_server import StubModel

from hearth.history import ChatStore

from support.paths import REPO
from support.ui import send_and_wait, service_api


def _picker_names(app) -> list[str]:
    box = app.window.chat_page.model_box
    return [box.itemText(i) for i in range(box.count())]


def _page_names(app) -> list[str]:
    model = app.window.models_page.table.model()
    return [model.index(r, 0).data() for r in range(model.rowCount())]


def test_a_model_created_by_the_cli_appears_and_a_deleted_one_goes(
    qtbot, make_app, real_service, tiny_llama_path, tmp_path
):
    app = make_app(real_service["url"], real_service["token"])
    assert app.models.watch_timer.isActive()
    app.models.watch_timer.setInterval(200)  # the app polls every few seconds; a test waits less
    name = "watched-tiny:latest"
    assert name not in app.models.names()
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text(f"FROM {tiny_llama_path}\n")
    host = real_service["url"].removeprefix("http://")
    env = dict(os.environ, HEARTH_HOST=host, HEARTH_API_KEY=real_service["token"])
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    made = subprocess.run(
        [sys.executable, "-m", "hearth", "create", name, "-f", str(modelfile)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    qtbot.waitUntil(lambda: name in app.models.names(), timeout=10_000)
    qtbot.waitUntil(lambda: any("watched-tiny" in n for n in _picker_names(app)))
    assert any("watched-tiny" in str(n) for n in _page_names(app))
    # an unchanged list is not rebuilt: no models_changed while nothing happens
    changes: list[int] = []
    app.models.models_changed.connect(lambda: changes.append(1))
    qtbot.wait(1000)
    assert changes == []
    service_api(real_service, "/api/delete", {"model": name})  # another client deletes it
    qtbot.waitUntil(lambda: name not in app.models.names(), timeout=10_000)
    assert changes == [1]


def test_the_watch_asks_only_while_the_window_is_seen(qtbot, stub, make_app):
    app = make_app(stub.url)
    app.models.watch_timer.setInterval(100)
    app.window.showMinimized()
    qtbot.wait(50)
    stub.models.append(StubModel("hidden:latest"))
    qtbot.wait(600)
    assert "hidden:latest" not in app.models.names()
    app.window.showNormal()
    qtbot.waitUntil(lambda: "hidden:latest" in app.models.names(), timeout=5_000)


def test_the_first_run_offer_goes_once_a_chat_model_is_installed(qtbot, stub, make_app):
    app = make_app(stub.url)  # the stub has only the bundled base model: the offer shows
    window = app.window
    qtbot.waitUntil(lambda: getattr(window, "first_model_offer", None) is not None)
    assert window.first_model_offer.isVisible()
    app.models.watch_timer.setInterval(100)
    # the user pulls a chat model in a terminal (`hearth pull`), and chats with it
    stub.models.append(StubModel("qwen3:0.6b"))
    qtbot.waitUntil(lambda: "qwen3:0.6b" in app.models.names(), timeout=5_000)
    assert not window.first_model_offer.isVisible()
    app.chat.set_model("qwen3:0.6b")
    send_and_wait(qtbot, app, "hello")
    assert not window.first_model_offer.isVisible()


def test_the_first_run_offer_is_not_shown_when_a_chat_model_is_there(qtbot, stub, make_app):
    stub.models.append(StubModel("qwen3:0.6b"))
    app = make_app(stub.url)
    qtbot.wait(200)
    assert getattr(app.window, "first_model_offer", None) is None


def test_an_automatic_title_is_set_once_from_the_first_question(qtbot, stub, make_app):
    app = make_app(stub.url)
    send_and_wait(qtbot, app, "Why is the sky blue?")
    chat_id = app.chat.chat.id
    send_and_wait(qtbot, app, "And what about sunsets on Mars?")
    assert app.store.chat(chat_id).title == "Why is the sky blue?"
    assert app.history.model.index(0, 0).data() == "Why is the sky blue?"
    assert app.window.windowTitle() == "Why is the sky blue? — Hearth"


def test_set_auto_title_only_names_an_untitled_chat(tmp_path: Path):
    s = ChatStore(tmp_path / "c.db")
    chat = s.create_chat("m")
    assert s.set_auto_title(chat.id, "first question")
    assert not s.set_auto_title(chat.id, "second question")
    assert s.chat(chat.id).title == "first question" and s.chat(chat.id).title_auto
    s.rename_chat(chat.id, "Mine")
    assert not s.set_auto_title(chat.id, "third")
    assert s.chat(chat.id).title == "Mine"
