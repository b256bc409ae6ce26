"""Compare in the desktop app against a real `hearth serve` with two models: the default model
(gemma3:270m) and a tiny random llama (tests/tiny_models.py, written with the gguf writer),
registered with `/api/create`.

One question goes to both (the header's Compare button, the second model picked on the bar
over the message box); both columns fill, each with its own model's reply (the same words the
service gives that model for the same request asked directly: greedy decoding) and its figures
as the transcript shows them; continuing with the right-hand reply moves the chat onto that
model, the left one stays as a branch (in the history, the JSON export, and on screen when the
chat is reopened, where it can be chosen again). Stop ends both replies.

Against the stub service (fast): Compare needs a second model, refuses the chat's own, is for
one question; both replies stream at the same time; a column that fails leaves the other.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from PySide6.QtCore import Qt
from stub_server import StubModel

from hearth.history.records import DONE, STOPPED, STREAMING
from hearth.ui.controllers.reply import format_stats
from hearth.ui.controllers.request import chat_body
from hearth.ui.widgets.compare_view import CompareView

from support.ui import send_and_wait, service_api

DEFAULT = "gemma3:270m"
OTHER = "tiny-llama:latest"
OPTIONS = {"num_predict": 8, "temperature": 0.0, "seed": 1, "num_ctx": 512}
QUESTION = "Name one colour of the sky."


@pytest.fixture(scope="module")
def second_model(real_service: dict[str, Any], tiny_llama_path) -> Iterator[str]:
    """The tiny llama, registered with the session's service (removed afterwards)."""
    body = {"model": OTHER, "from": str(tiny_llama_path), "stream": False}
    assert service_api(real_service, "/api/create", body)["status"] == "success"
    yield OTHER
    service_api(real_service, "/api/delete", {"model": OTHER})


def _app(make_app, real_service: dict[str, Any], options: dict[str, Any]):
    app = make_app(real_service["url"], real_service["token"])
    app.chat.new_chat(DEFAULT)
    app.chat.update_chat_settings("", dict(options))
    return app


def _compare_on(app, other: str) -> None:
    """Turn Compare on as a user does: the header's button, then the model on the bar."""
    page = app.window.chat_page
    page.compare_btn.click()
    bar = page.compare_bar
    assert bar.isVisibleTo(page) and page.compare_btn.isChecked()
    index = bar.model_box.findText(other)
    assert index >= 0, other
    bar.model_box.setCurrentIndex(index)
    bar.model_box.activated.emit(index)
    assert app.chat.compare.other == other
    assert DEFAULT in bar.label.text()


def _ask_both(qtbot, app, text: str, timeout: int = 300_000) -> list[int]:
    """Type `text`, press Enter; both columns stream at once; wait until both ended."""
    edit = app.window.chat_page.composer.edit
    edit.setFocus()
    edit.setPlainText(text)
    with qtbot.waitSignal(app.chat.compare.finished, timeout=timeout) as finished:
        qtbot.keyClick(edit, Qt.Key.Key_Return)
        row = app.chat.conversation.items()[-1]
        # both requests went out at once: two columns, both streaming, before either ended
        assert [c.state for c in row.compared] == [STREAMING, STREAMING]
        assert app.chat.busy and not app.window.chat_page.compare_bar.isVisibleTo(
            app.window.chat_page
        )  # one question: Compare is off again
    return list(finished.args[1])


def _view(app) -> CompareView:
    views = [w for w in app.window.chat_page.transcript.widgets if isinstance(w, CompareView)]
    assert len(views) == 1
    return views[0]


@pytest.mark.slow
def test_one_question_to_two_models_then_continue_with_either(
    qtbot, make_app, real_service, second_model, tmp_path
):
    app = _app(make_app, real_service, OPTIONS)
    chat = app.chat
    _compare_on(app, second_model)
    ids = _ask_both(qtbot, app, QUESTION)
    assert not chat.busy
    left, right = (app.store.message(i) for i in ids)
    assert (left.model, left.compare, right.model, right.compare) == (DEFAULT, 1, OTHER, 2)
    assert left.state == right.state == DONE
    user = app.store.message(left.parent_id)
    assert right.parent_id == user.id and user.content == QUESTION
    # each column holds its own model's reply: what the service answers that model directly
    for reply in (left, right):
        path = [user]
        body = chat_body(chat.chat, path, {}, None) | {"model": reply.model, "stream": False}
        direct = service_api(real_service, "/api/chat", body)
        assert reply.content == direct["message"]["content"] and reply.content.strip()
        assert reply.stats["eval_count"] == direct["eval_count"]
    # both columns on screen, with their figures as the transcript shows them under a reply
    view = _view(app)
    assert [c.item.id for c in view.columns] == ids
    for column, reply in zip(view.columns, (left, right), strict=True):
        shown = column.message
        assert shown.role_label.text() == reply.model
        assert shown.body.markdown_source() == reply.content
        figures = shown.stats_label.text()
        assert figures == format_stats(reply.stats) and "tok/s" in figures
        assert f"{reply.stats['eval_count']} tokens" in figures
    # the chat goes on with the left (its own model) until the user picks the other
    assert chat.chat.current_leaf == left.id
    assert view.columns[0].chosen_label.isVisibleTo(view)
    assert view.columns[1].choose_btn.isVisibleTo(view)
    view.columns[1].choose_btn.click()
    assert chat.chat.model == OTHER and chat.chat.current_leaf == right.id
    assert app.window.chat_page.model_box.currentText() == OTHER
    view = _view(app)
    assert view.columns[1].chosen_label.isVisibleTo(view)
    assert not view.columns[1].choose_btn.isVisibleTo(view)
    # the next question is answered by the chosen model alone, under the chosen reply
    send_and_wait(qtbot, app, "And another one?")
    path = app.store.path(chat.chat.id)
    assert [m.id for m in path[:2]] == [user.id, right.id]
    assert path[-1].role == "assistant" and path[-1].model == OTHER and path[-1].state == DONE
    assert path[-1].compare == 0 and path[-2].content == "And another one?"
    # the other reply stays, as a branch of the same chat
    assert [m.id for m in app.store.comparison(right.id)] == ids
    assert app.store.siblings(right.id) == ids
    # exported: both replies, marked by column; the branch on screen goes through the right
    out = tmp_path / "chats.json"
    app.history.export_to(out, "json", [chat.chat.id])
    exported = json.loads(out.read_text())["chats"][0]
    messages = {m["id"]: m for m in exported["messages"]}
    compared = [m for m in messages.values() if m.get("compare")]
    assert [(m["model"], m["compare"], m["content"]) for m in compared] == [
        (DEFAULT, 1, left.content),
        (OTHER, 2, right.content),
    ]
    leaf, chain = exported["current_leaf"], []
    while leaf is not None:
        chain.append(messages[leaf])
        leaf = messages[leaf]["parent_id"]
    assert [m["content"] for m in reversed(chain)][:2] == [QUESTION, right.content]
    # reopened: the chosen branch, the comparison still there, the other still selectable
    chat_id = chat.chat.id
    chat.new_chat()
    chat.open_chat(chat_id)
    view = _view(app)
    assert [c.item.id for c in view.columns] == ids
    assert view.columns[1].chosen_label.isVisibleTo(view)
    figures = view.columns[0].message.stats_label.text()
    assert figures == format_stats(left.stats) and "tok/s" in figures
    assert app.chat.conversation.items()[-1].model == OTHER
    view.columns[0].choose_btn.click()
    assert chat.chat.model == DEFAULT and chat.chat.current_leaf == left.id
    assert [m.id for m in app.store.path(chat_id)] == [user.id, left.id]


@pytest.mark.slow
def test_stop_ends_both_replies(qtbot, make_app, real_service, second_model):
    app = _app(make_app, real_service, {**OPTIONS, "num_predict": 400})
    _compare_on(app, second_model)
    edit = app.window.chat_page.composer.edit
    edit.setPlainText("Tell me a long story about a lighthouse keeper.")
    with qtbot.waitSignal(app.chat.compare.finished, timeout=300_000) as finished:
        qtbot.keyClick(edit, Qt.Key.Key_Return)
        qtbot.waitUntil(
            lambda: any(c.content for c in app.chat.conversation.items()[-1].compared),
            timeout=240_000,
        )
        qtbot.keyClick(edit, Qt.Key.Key_Escape)  # Esc: stop
    states = finished.args[1]
    assert sorted(states.values()) == [STOPPED, STOPPED]
    for message_id in states:
        stored = app.store.message(message_id)
        assert stored.state == STOPPED and stored.stats.get("eval_count") is None
    assert not app.chat.busy
    assert any(app.store.message(i).content for i in states)


# -- against the stub service (fast): the bar, both requests in flight, a failing column ------


def _stub_app(stub, make_app, *names: str):
    stub.models = [StubModel(n) for n in (DEFAULT, *names)]
    app = make_app(stub.url)
    app.chat.new_chat(DEFAULT)
    return app


def test_compare_needs_a_second_model_and_is_for_one_question(qtbot, stub, make_app):
    app = _stub_app(stub, make_app)
    page = app.window.chat_page
    page.compare_btn.click()  # only the chat's own model is installed
    assert not page.compare_btn.isChecked() and not page.compare_bar.isVisibleTo(page)
    assert "second model" in app.window.toast.label.text()
    stub.models.append(StubModel("llama3.2:1b"))
    app.models.refresh()
    qtbot.waitUntil(lambda: "llama3.2:1b" in app.models.names(), timeout=10_000)
    page.compare_btn.click()
    assert app.chat.compare.other == "llama3.2:1b" and page.compare_bar.isVisibleTo(page)
    page.compare_bar.model_box.setCurrentIndex(page.compare_bar.model_box.findText(DEFAULT))
    page.compare_bar.model_box.activated.emit(0)  # the chat's own model: refused
    assert app.chat.compare.other == "llama3.2:1b"
    assert "other than the chat's own" in app.window.toast.label.text()
    page.compare_bar.close_btn.click()
    assert not app.chat.compare.other and not page.compare_btn.isChecked()
    app.window.act_compare.trigger()  # Ctrl+Shift+M
    assert app.chat.compare.other == "llama3.2:1b"
    assert len(_ask_both(qtbot, app, "hello", timeout=30_000)) == 2
    assert not app.chat.compare.other
    send_and_wait(qtbot, app, "and again", timeout=30_000)  # one model: Compare was for one
    asked = [
        (r["messages"][-1]["content"], r["model"])
        for r in stub.requests
        if r["path"] == "/api/chat"
    ]
    # the compared pair is in flight at once, so it may reach the stub in either order; the
    # next question goes out only once both ended
    assert sorted(asked[:2]) == [("hello", DEFAULT), ("hello", "llama3.2:1b")]
    assert asked[2:] == [("and again", DEFAULT)]


def test_both_stream_at_once_and_a_failing_column_leaves_the_other(qtbot, stub, make_app):
    app = _stub_app(stub, make_app, "llama3.2:1b")
    stub.delay = 0.2
    app.chat.compare.set_other("llama3.2:1b")
    stub.models = stub.models[:1]  # the second model is gone by the time the question goes
    edit = app.window.chat_page.composer.edit
    edit.setPlainText("hello")
    with qtbot.waitSignal(app.chat.compare.finished, timeout=30_000) as finished:
        qtbot.keyClick(edit, Qt.Key.Key_Return)
    left, right = (app.store.message(i) for i in finished.args[1])
    assert (left.state, right.state) == (DONE, "error")
    assert left.content == stub.reply and "llama3.2:1b" in right.error
    view = _view(app)
    assert view.columns[1].message.error_card.isVisibleTo(view)
    assert view.columns[0].message.stats_label.text() == format_stats(left.stats)
    # both in flight at once: with the model back, each column streams while the other does
    stub.models.append(StubModel("llama3.2:1b"))
    app.chat.compare.set_other("llama3.2:1b")
    edit.setPlainText("again")
    with qtbot.waitSignal(app.chat.compare.finished, timeout=30_000):
        qtbot.keyClick(edit, Qt.Key.Key_Return)
        qtbot.waitUntil(
            lambda: all(
                c.content and c.state == STREAMING
                for c in app.chat.conversation.items()[-1].compared
            ),
            timeout=10_000,
        )
