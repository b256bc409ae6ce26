"""Wiring for tools: Settings → Tools (the servers, their status and tools, the limits, the
tools that run without asking), the chat header's Tools menu and its notice, and the approval
card a waiting call puts under the conversation."""

from __future__ import annotations

import shlex

from .controllers.chat import ChatController
from .controllers.models import ModelsController
from .controllers.settings import SettingsController
from .controllers.tools import ToolsController, server_entry
from .views.main_window import SETTINGS_PAGE, MainWindow
from .views.tools_settings import PasteServersDialog, ServerDialog, ServerRow
from .widgets.tool_call import ApprovalCard

__all__ = ["wire_tools"]


def wire_tools(
    window: MainWindow,
    tools: ToolsController,
    chat: ChatController,
    models: ModelsController,
    settings: SettingsController,
) -> None:
    card, page = window.settings_page.tools, window.chat_page

    # -- Settings → Tools ------------------------------------------------------------------------

    def rows() -> list[ServerRow]:
        status = tools.status()
        out = []
        for name, config in tools.servers().items():
            st = status.get(name)
            summary = config.url or shlex.join([config.command or "", *config.args])
            out.append(
                ServerRow(
                    name=name,
                    summary=summary or "",
                    enabled=config.enabled,
                    state=st.state if st else "stopped",
                    error=st.error if st else "",
                    tools=[(t.name, t.description) for t in (st.tools if st else [])],
                    protocol=st.protocol if st else "",
                )
            )
        return out

    def show_card() -> None:
        s = settings.current()
        card.show_servers(rows(), tools.load_error)
        card.show_limits(s.tool_max_steps, s.tool_call_timeout)
        card.show_allowed([g.label() for g in tools.grants()])

    def validate(document: object) -> str:
        return tools.validate(document)[1]  # type: ignore[arg-type]

    def open_server_dialog(old_name: str = "") -> None:
        config = tools.servers().get(old_name)
        dialog = ServerDialog(validate, old_name, server_entry(config) if config else None, window)
        card.dialog = dialog  # type: ignore[attr-defined]  # tests reach the open dialog here

        def accepted() -> None:
            name = dialog.server_name()
            parsed, _why = tools.validate({"mcpServers": {name: dialog.entry()}})
            if name in parsed:
                tools.put_server(parsed[name], old_name)

        dialog.accepted.connect(accepted)
        dialog.open()

    def open_paste_dialog() -> None:
        dialog = PasteServersDialog(validate, window)
        card.dialog = dialog  # type: ignore[attr-defined]
        dialog.accepted.connect(
            lambda: tools.add_servers(tools.validate(dialog.text.toPlainText())[0])
        )
        dialog.open()

    def set_call_timeout(seconds: int) -> None:
        tools.set_call_timeout(seconds)

    tools.servers_changed.connect(show_card)
    tools.status_changed.connect(show_card)
    settings.changed.connect(show_card)
    card.add_requested.connect(lambda: open_server_dialog())
    card.edit_requested.connect(open_server_dialog)
    card.remove_requested.connect(tools.remove_server)
    card.paste_requested.connect(open_paste_dialog)
    card.check_requested.connect(lambda: tools.check())
    card.max_steps_changed.connect(settings.set_tool_max_steps)
    card.call_timeout_changed.connect(set_call_timeout)

    def forget(row: int) -> None:
        grants = tools.grants()
        if 0 <= row < len(grants):
            tools.revoke(grants[row])

    card.forget_allowed.connect(forget)
    show_card()

    # -- the chat: which servers it uses, and whether its model can -------------------------------

    def show_chat_tools() -> None:
        page.set_tools(chat.tool_servers(), chat.tools_refused())

    chat.chat_opened.connect(lambda _id: show_chat_tools())
    chat.chat_meta_changed.connect(show_chat_tools)
    models.model_updated.connect(lambda _name: show_chat_tools())
    models.models_changed.connect(show_chat_tools)
    tools.servers_changed.connect(show_chat_tools)
    page.tool_server_toggled.connect(chat.set_chat_tool)
    page.tools_setup_requested.connect(lambda: window.show_page(SETTINGS_PAGE))
    show_chat_tools()

    # -- a call waiting for the user ---------------------------------------------------------------

    def show_approval(*_a: object) -> None:
        pending = chat.pending_approval()
        if pending is None:
            page.transcript.clear_approval()
            return
        spec = pending.spec
        approval = ApprovalCard(spec.name, spec.server, spec.description, pending.call.arguments)
        approval.decided.connect(chat.answer_approval)
        page.transcript.show_approval(approval)
        approval.allow_btn.setFocus()

    chat.approval_needed.connect(show_approval)
    chat.approval_settled.connect(page.transcript.clear_approval)
    chat.chat_opened.connect(show_approval)  # back to the chat whose call waits: ask again
