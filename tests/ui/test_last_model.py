"""New chats use the model last picked (in a chat's model chooser or from the models page),
remembered in the settings across restarts, and the default model once it is deleted."""

from __future__ import annotations

from hearth.app_settings import load_settings
from hearth.default_model import DEFAULT_MODEL

from support.ui import send_and_wait

B = "qwen3:1.7b"
C = "llama3.2:1b"


def pick_in_chooser(app, name: str) -> None:
    box = app.window.chat_page.model_box
    box.setCurrentIndex(box.findText(name))
    box.activated.emit(box.currentIndex())  # what choosing from the list does


def new_chat_by_button(app) -> int:
    app.window.sidebar.new_btn.click()
    return app.chat.chat.id


def test_new_chats_use_the_model_last_picked(qtbot, stub, make_app):
    from stub_server import StubModel

    stub.models += [StubModel(B), StubModel(C)]
    app = make_app(stub.url)
    first = app.chat.chat
    assert first.model == DEFAULT_MODEL
    send_and_wait(qtbot, app, "hello")
    second = new_chat_by_button(app)
    assert second != first.id and app.chat.chat.model == DEFAULT_MODEL  # nothing picked yet

    pick_in_chooser(app, B)
    assert app.chat.chat.model == B
    assert load_settings().last_model == B  # saved at once, not only at exit
    send_and_wait(qtbot, app, "hi")
    app.chat.open_chat(first.id)  # a chat on the default model is open...
    third = new_chat_by_button(app)
    assert third not in (first.id, second) and app.chat.chat.model == B  # ...the new one is on B

    # A new app on the same data folder: the first new chat is on B too.
    app.shutdown()
    app = make_app(stub.url)
    assert app.settings.last_model == B
    app.chat.open_chat(first.id)
    fourth = new_chat_by_button(app)
    assert fourth != first.id and app.chat.chat.model == B

    # Starting a chat from the models page is a pick as well.
    send_and_wait(qtbot, app, "on B")
    app.window.models_page.chat_requested.emit(C)
    assert app.chat.chat.model == C and app.chat.chat.id != fourth
    send_and_wait(qtbot, app, "on C")
    app.chat.open_chat(first.id)
    assert app.store.chat(new_chat_by_button(app)).model == C

    # Once the model last picked is deleted, new chats are on the default model again.
    app.models.delete(C)
    qtbot.waitUntil(lambda: C not in app.models.names(), timeout=10_000)
    app.chat.open_chat(first.id)
    assert app.store.chat(new_chat_by_button(app)).model == DEFAULT_MODEL
