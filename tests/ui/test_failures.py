"""Failure cases against the stub service: each shows a clear, non-blocking message."""

from __future__ import annotations

import sys

import pytest
from PySide6.QtGui import QColor, QImage
from stub_server import StubModel

from hearth.history.records import ERROR, STOPPED

from support.ui import file_drop, send_and_wait


def _png(tmp_path, name="pic.png"):
    img = QImage(32, 24, QImage.Format.Format_RGB32)
    img.fill(QColor("#C8552B"))
    path = tmp_path / name
    img.save(str(path))
    return path


def test_out_of_memory_mid_stream_keeps_text_and_explains(qtbot, stub, make_app):
    stub.error, stub.error_after = "out of memory: the model needs 9.1 GiB, 4.0 GiB free", 3
    app = make_app(stub.url)
    send_and_wait(qtbot, app, "hello")
    reply = app.chat.conversation.items()[-1]
    assert reply.state == ERROR
    assert reply.content == "Hello! This is "  # what streamed before the error is kept
    assert "Not enough memory" in reply.error
    assert app.window.toast.isVisible() and app.window.toast.level == "error"
    widget = app.window.chat_page.transcript.widgets[-1]
    assert widget.error_card.isVisible()
    assert app.window.chat_page.composer.send_btn.isEnabled()  # nothing is blocked
    stub.error = ""
    with qtbot.waitSignal(app.chat.reply_finished, timeout=10_000):
        widget.retry_btn.click()  # "Try again" answers the same question as a new version
    reply = app.chat.conversation.items()[-1]
    assert reply.state == "done" and (reply.version, reply.versions) == (2, 2)


def test_missing_model_says_how_to_fix_it(qtbot, stub, make_app):
    app = make_app(stub.url)
    stub.models = []  # deleted behind the app's back
    send_and_wait(qtbot, app, "hello")
    reply = app.chat.conversation.items()[-1]
    assert reply.state == ERROR and "is not installed" in reply.error


def test_stop_keeps_the_partial_reply(qtbot, stub, make_app):
    stub.reply = "one two three four five six seven eight nine ten " * 20
    stub.delay = 0.05
    app = make_app(stub.url)
    edit = app.window.chat_page.composer.edit
    edit.setPlainText("count")
    app.window.chat_page.composer._submit()
    qtbot.waitUntil(lambda: len(app.chat.conversation.items()[-1].content) > 10, timeout=10_000)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=10_000):
        app.window.act_stop.trigger()  # Esc
    reply = app.chat.conversation.items()[-1]
    assert reply.state == STOPPED
    assert 10 < len(reply.content) < len(stub.reply)
    assert app.store.message(reply.id).content == reply.content


def test_image_on_a_text_only_model_is_refused_with_a_reason(qtbot, stub, make_app, tmp_path):
    app = make_app(stub.url)
    mime = file_drop(_png(tmp_path))
    assert app.drops.hint(mime) == "“gemma3:270m” cannot see images"
    assert not app.drops.handle(mime)
    assert app.chat.pending_images == []
    assert "cannot see images" in app.window.toast.label.text()


def test_image_on_a_vision_model_is_sent_with_the_message(qtbot, stub, make_app, tmp_path):
    stub.models.append(StubModel("gemma3:4b", capabilities=["completion", "vision"]))
    app = make_app(stub.url)
    app.chat.set_model("gemma3:4b")
    mime = file_drop(_png(tmp_path))
    assert app.drops.handle(mime)
    assert app.window.chat_page.composer.strip.isVisible()
    send_and_wait(qtbot, app, "what is this?")
    sent = [r for r in stub.requests if r["path"] == "/api/chat"][-1]
    assert len(sent["messages"][-1]["images"]) == 1
    user = app.chat.conversation.items()[0]
    assert len(user.images) == 1 and not app.chat.pending_images


def test_a_service_that_cannot_start_shows_why_and_where_the_log_is(qtbot, make_app, monkeypatch):
    import hearth.launcher as launcher

    monkeypatch.setattr(
        launcher,
        "serve_command",
        lambda *_args: [sys.executable, "-c", "print('no GPU driver found'); exit(3)"],
    )
    app = make_app(ready=False)
    with qtbot.waitSignal(app.service.failed, timeout=30_000) as blocker:
        pass
    reason, log = blocker.args
    assert "exit status 3" in reason and "no GPU driver found" in reason
    assert log.endswith("serve.log")
    box = app.window.dialogs.failure_box
    assert box is not None and box.isVisible() and log in box.informativeText()


@pytest.mark.parametrize("status", [401])
def test_a_wrong_key_is_reported(qtbot, stub, make_app, status):
    stub.token = "right"
    app = make_app(stub.url, "wrong", ready=False)
    qtbot.waitUntil(lambda: app.service.state == "failed", timeout=10_000)
    assert "401" in app.window.dialogs.failure_box.text()


def test_where_a_loaded_model_runs_and_the_gpu_layers_setting_reach_the_user(qtbot, stub, make_app):
    """The models page and the chat header say where the loaded model runs (/api/ps's
    hearth.layout); the GPU layers setting travels in each request as options.num_gpu."""
    stub.layout = "3/4 layers on CUDA0"
    app = make_app(stub.url)
    page, header = app.window.models_page, app.window.chat_page
    page.select_name("gemma3:270m")
    assert page.d_fields["runs"].text() == "Not loaded" and header.runs_on.isHidden()
    app.window.settings_page.num_gpu.setValue(2)  # the GPU layers setting
    send_and_wait(qtbot, app, "hello")
    qtbot.waitUntil(lambda: header.runs_on.text() == "3/4 layers on CUDA0", timeout=10_000)
    assert page.d_fields["runs"].text() == "3/4 layers on CUDA0" and not header.runs_on.isHidden()
    sent = [r for r in stub.requests if r["path"] == "/api/chat"][-1]
    assert sent["options"]["num_gpu"] == 2


def test_work_offline_starts_the_private_service_offline(qtbot, make_app, monkeypatch):
    """The app's "Work offline" switch reaches its own service as HEARTH_OFFLINE (so API clients
    cannot pull either): the child sees it in its environment."""
    import hearth.launcher as launcher
    from hearth.app_settings import load_settings, save_settings

    settings = load_settings()
    settings.work_offline = True
    save_settings(settings)
    code = "import os; print('HEARTH_OFFLINE=' + os.environ.get('HEARTH_OFFLINE', '-')); exit(3)"
    monkeypatch.setattr(launcher, "serve_command", lambda *_args: [sys.executable, "-c", code])
    app = make_app(ready=False)
    with qtbot.waitSignal(app.service.failed, timeout=30_000) as blocker:
        pass
    assert "HEARTH_OFFLINE=1" in blocker.args[0]


def test_the_models_page_says_which_engine_runs_a_model_and_why(qtbot, stub, make_app):
    """A plugin that could not load the file: the service runs it on llama.cpp and says why
    (/api/show's engine_reason), and the Models page shows that sentence."""
    why = (
        "Hearth's plugin for architecture 'qwen2' could not load the file (q.gguf lacks "
        "tensor 'blk.0.attn_q.weight'); the llama.cpp engine runs it"
    )
    stub.models = [
        StubModel("gemma3:270m"),
        StubModel("qwen:tiny", family="qwen2", engine="llamacpp", engine_reason=why),
    ]
    app = make_app(stub.url)
    page = app.window.models_page
    for name, row in (
        ("gemma3:270m", "gemma3 — Hearth (a Hearth plugin runs architecture 'gemma3')"),
        ("qwen:tiny", f"qwen2 — llama.cpp ({why})"),
    ):
        page.select_name(name)
        qtbot.waitUntil(lambda row=row: page.d_fields["arch"].text() == row, timeout=10_000)
