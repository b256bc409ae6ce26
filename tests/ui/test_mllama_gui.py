"""Llama 3.2 Vision (mllama) in the desktop app against a real `hearth serve`: a tiny random
`MllamaForConditionalGeneration` saved as a Hugging Face folder with Meta's chat template and
registered with `/api/create {"from": FOLDER, "quantize": "f32"}` (converted by the service).

Drop a picture, ask; the answer on screen is the service's answer for the same chat (the body
the app sent, replayed without streaming; greedy, so one answer), which
tests/server/test_mllama_e2e.py shows to be transformers' greedy continuation. The picture is
stored with the chat, the Models page shows the Vision badge.

Meta's template refuses an image together with a system message ("Prompting with images is
incompatible with system messages."): without a system prompt the app sends no system message
at all (not an empty one); with one set, the user sees the service's sentence on the failed
reply, and nothing is lost (the question and its picture stay, on screen and in the history),
so clearing the system prompt and retrying answers it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from PySide6.QtCore import Qt

from hearth.history.records import DONE, ERROR
from hearth.ui.controllers import chat_inputs
from hearth_mllama.testing import TinyMllamaVision, random_png, tiny_mllama
from tests.plugins.mllama_checkpoint import LLAMA32_VISION_TEMPLATE, save_tiny

from support.ui import drop_file, service_api

MODEL = "tiny-mllama-ui:latest"
SPEC = TinyMllamaVision(vocab=300, text_layers=5, cross_attention_layers=(1, 3))
# Greedy, no penalty: one answer for a prompt (and transformers' in test_mllama_e2e).
OPTIONS = {"num_predict": 8, "temperature": 0.0, "repeat_penalty": 1.0, "num_ctx": 512}
PICTURE = random_png(224, 50, 1)  # a wide picture: 1x4 tiles of 56
QUESTION = "what is the er on the"
REFUSAL = "Prompting with images is incompatible with system messages."


@pytest.fixture(scope="module")
def mllama_model(
    tmp_path_factory: pytest.TempPathFactory, real_service: dict[str, Any]
) -> Iterator[str]:
    """The tiny model's folder converted by the session's service (removed afterwards)."""
    folder = tmp_path_factory.mktemp("Llama-3.2-tiny-Vision-Instruct")
    save_tiny(tiny_mllama(SPEC), folder, LLAMA32_VISION_TEMPLATE)
    body = {"model": MODEL, "from": str(folder), "quantize": "f32", "stream": False}
    assert service_api(real_service, "/api/create", body)["status"] == "success"
    show = service_api(real_service, "/api/show", {"model": MODEL})
    assert "vision" in show["capabilities"] and show["details"]["family"] == "mllama"
    yield MODEL
    service_api(real_service, "/api/delete", {"model": MODEL})


@pytest.fixture()
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The /api/chat bodies the app sends (its own `chat_body`, recorded where the chat
    controller's inputs layer calls it)."""
    bodies: list[dict[str, Any]] = []
    original = chat_inputs.chat_body

    def record(*args: Any, **kwargs: Any) -> dict[str, Any]:
        body = original(*args, **kwargs)
        bodies.append(json.loads(json.dumps(body)))
        return body

    monkeypatch.setattr(chat_inputs, "chat_body", record)
    return bodies


def _app(make_app, real_service, system: str = ""):
    app = make_app(real_service["url"], real_service["token"])
    app.chat.new_chat(MODEL)
    app.chat.update_chat_settings(system, dict(OPTIONS))
    return app


def _ask(qtbot, app, text: str) -> Any:
    """Type `text`, press Enter, wait for the reply; the reply's item."""
    edit = app.window.chat_page.composer.edit
    edit.setFocus()
    edit.setPlainText(text)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=120_000):
        qtbot.keyClick(edit, Qt.Key.Key_Return)
    return app.chat.conversation.items()[-1]


def _service_answer(real_service: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The service's answer to `body` (what the app sent), without streaming."""
    return service_api(real_service, "/api/chat", {**body, "stream": False})


def test_ask_about_a_dropped_picture(qtbot, make_app, real_service, mllama_model, sent, tmp_path):
    app = _app(make_app, real_service)
    assert app.models.info(MODEL).vision
    chat_id = app.chat.chat.id
    photo = tmp_path / "photo.png"
    photo.write_bytes(PICTURE)
    drop_file(app, photo)
    assert app.chat.pending_images == [PICTURE], app.window.toast.label.text()
    reply = _ask(qtbot, app, QUESTION)
    assert reply.state == DONE and reply.content, reply.error

    # what the app sent: the user turn with its picture, and no system message (not even an
    # empty one: Meta's template would refuse the image)
    (body,) = sent
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert body["messages"][0]["content"] == QUESTION and len(body["messages"][0]["images"]) == 1
    assert body["model"] == MODEL and body["options"]["temperature"] == 0

    # the answer on screen is the service's for that chat, and it depends on the picture
    expected = _service_answer(real_service, body)
    assert reply.content == expected["message"]["content"]
    assert reply.stats["eval_count"] == expected["eval_count"] == 8
    text_only = {**body, "messages": [{"role": "user", "content": QUESTION}]}
    assert _service_answer(real_service, text_only)["message"]["content"] != reply.content

    # the picture is stored with the chat
    user, answer = app.store.path(chat_id)
    assert user.images == [PICTURE] and answer.content == reply.content

    # the Models page shows the Vision badge
    page = app.window.models_page
    page.select_name(MODEL)
    assert page.badge_row.isVisibleTo(page) and "vision" in page.badges
    assert page.badges["vision"].text() == "Vision"


def test_a_system_prompt_with_a_picture_shows_the_templates_sentence_and_keeps_all(
    qtbot, make_app, real_service, mllama_model, sent, tmp_path
):
    app = _app(make_app, real_service, system="Answer briefly.")
    page = app.window.chat_page
    photo = tmp_path / "photo.png"
    photo.write_bytes(PICTURE)
    drop_file(app, photo)
    failed = _ask(qtbot, app, QUESTION)
    assert failed.state == ERROR
    assert REFUSAL in failed.error  # the service's sentence (Meta's template's)
    assert sent[-1]["messages"][0] == {"role": "system", "content": "Answer briefly."}
    widget = page.transcript.widget_for(failed.id)
    assert widget.error_card.isVisible() and REFUSAL in widget.error_label.text()
    assert widget.retry_btn.isEnabled()
    # nothing is lost: the question and its picture, on screen and in the history
    user = app.chat.conversation.items()[0]
    assert user.content == QUESTION and user.images == [PICTURE]
    assert app.store.message(user.id).images == [PICTURE]
    # without the system prompt, trying again answers the same question about the picture
    app.chat.update_chat_settings("", dict(OPTIONS))
    with qtbot.waitSignal(app.chat.reply_finished, timeout=120_000):
        widget.retry_btn.click()
    retried = app.chat.conversation.items()[-1]
    assert retried.state == DONE and retried.content, retried.error
    body = sent[-1]
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert body["messages"][0]["images"] == sent[0]["messages"][-1]["images"]
    assert retried.content == _service_answer(real_service, body)["message"]["content"]
