"""Wiring for MCP beyond tools: the composer's MCP menu (prompts and resources of the open
chat's servers, listed again when it opens and when the open chat's servers change), the hint
a `/name` being typed shows, the prompt argument form, and the form a server's question during
a call is answered in."""

from __future__ import annotations

from PySide6.QtWidgets import QDialog

from .controllers.chat import ChatController
from .controllers.mcp import McpController
from .views.main_window import MainWindow
from .widgets.mcp import ElicitationDialog, McpButton, PromptArgsDialog, prompt_hint

__all__ = ["wire_mcp"]


def wire_mcp(window: MainWindow, mcp: McpController, chat: ChatController) -> None:
    composer = window.chat_page.composer
    button = McpButton(composer)
    composer.add_button(button)
    composer.mcp = button  # type: ignore[attr-defined]  # tests reach it here
    default_hint = composer.hint.text()

    def show_button() -> None:
        button.setVisible(any(on for _n, on in chat.tool_servers()))

    def listed() -> None:
        button.show_items(mcp.prompts, mcp.resources)
        hint()

    def hint() -> None:
        text = composer.text()
        if text == "/":
            mcp.want_prompts()
        found = mcp.matching(text) if text.startswith("/") and "\n" not in text else []
        composer.hint.setText("   ".join(prompt_hint(p) for p in found[:3]) or default_hint)

    def refresh() -> None:
        show_button()
        mcp.chat_changed()

    mcp.listed.connect(listed)
    mcp.notice.connect(window.notify)
    button.opening.connect(mcp.refresh)
    button.prompt_chosen.connect(mcp.choose_prompt)
    button.resource_chosen.connect(mcp.attach_resource)
    composer.edit.textChanged.connect(hint)
    chat.chat_opened.connect(lambda _id: refresh())
    chat.chat_meta_changed.connect(refresh)  # a server turned on or off for the chat

    def ask_arguments(spec: object, values: dict[str, str]) -> None:
        dialog = PromptArgsDialog(spec, values, window)  # type: ignore[arg-type]
        mcp.dialog = dialog  # type: ignore[attr-defined]  # tests reach the open dialog here

        def done(result: int) -> None:
            if result == QDialog.DialogCode.Accepted:
                if composer.text().strip().startswith("/"):
                    composer.clear()
                mcp.use_prompt(dialog.spec, dialog.values())
            dialog.deleteLater()

        dialog.finished.connect(done)
        dialog.open()

    forms: dict[int, ElicitationDialog] = {}

    def ask(q: object) -> None:
        dialog = ElicitationDialog(q, window)  # type: ignore[arg-type]
        forms[id(q)] = dialog
        mcp.form = dialog  # type: ignore[attr-defined]  # tests reach the open form here
        dialog.answered.connect(lambda answer: mcp.answer(dialog.question, answer))
        dialog.finished.connect(lambda _r: forms.pop(id(q), None))
        dialog.open()

    def closed(q: object) -> None:
        dialog = forms.pop(id(q), None)
        if dialog is not None:
            dialog.reject()

    mcp.arguments_needed.connect(ask_arguments)
    mcp.question.connect(ask)
    mcp.question_closed.connect(closed)
    show_button()
