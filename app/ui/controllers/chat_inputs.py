"""What goes with the open chat's next request (`ChatInputs`, a layer of
`chat.ChatController` over chat_state.py): the images and documents waiting for the next
message (refused, with a reason, where the chat's model cannot see), the tool servers the chat
has on (and why they will not be used with a model that offers no tools), the answer to a tool
call waiting for approval, and the /api/chat request (`_body`) that answers a branch.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ...agent.loop import no_tools_sentence
from ...history import Message
from ..widgets.documents import ChipInfo
from .agent_reply import AgentReply, PendingCall
from .chat_state import ChatState
from .images import attachable_images
from .request import chat_body

__all__ = ["ChatInputs"]


class ChatInputs(ChatState):
    """Images, documents, tool servers and the request (see the module doc)."""

    # -- images ------------------------------------------------------------------------------

    def can_see_images(self) -> bool:
        """False only when the open chat's model is known to be text-only; while its details
        have not arrived (or it is not installed) the service has the last word."""
        info = self._models.info(self.model)
        return info is None or not info.details_loaded or info.vision

    def images_refused(self) -> str:
        """Why the open chat's model will refuse pictures ('' when it may take them)."""
        if self.can_see_images():
            return ""
        return self.tr(
            "“%1” cannot see images: it is a text-only model. Pick a model with vision "
            "to ask about a picture."
        ).replace("%1", self.model)

    def check_images_allowed(self) -> bool:
        """True when the open chat's model may take pictures; else say why (a notice)."""
        reason = self.images_refused()
        if reason:
            self.notice.emit("error", reason)
        return not reason

    def attach_images(self, images: list[bytes]) -> bool:
        """Queue images for the next message; refused (with a reason) for text-only models."""
        if not images or not self.check_images_allowed():
            return False
        good = attachable_images(images)
        if len(good) < len(images):
            self.notice.emit("error", self.tr("That file is not an image Hearth can read."))
        self.pending_images.extend(good)
        self.attachments_changed.emit()
        return bool(good)

    def remove_attachment(self, index: int) -> None:
        if 0 <= index < len(self.pending_images):
            del self.pending_images[index]
            self.attachments_changed.emit()

    # -- documents ---------------------------------------------------------------------------

    def attach_documents(self, paths: list[Path]) -> bool:
        """Read documents (off the GUI thread) to go with the next message; a PDF's scanned
        pages are read by the chat's model when it can see, else by an installed vision model."""
        if not paths:
            return False
        self.documents.attach(paths, self.model)
        return True

    def document_chips(self) -> list[ChipInfo]:
        """The waiting documents, each with how it would be sent now (whole or searched)."""
        chat = self.chat
        path = self._store.path(chat.id) if chat else []
        return self.documents.pending_chips(
            chat.system_prompt if chat else "", path, self.num_ctx()
        )

    def _pinned(self, message: Message) -> bool:
        """A question whose documents' chips it carries is never summarised away."""
        return bool(self.documents.chat_documents.attached(message.id))

    # -- tools -------------------------------------------------------------------------------

    def tool_servers(self) -> list[tuple[str, bool]]:
        """Each enabled tool server, and whether the open chat uses it."""
        used = set(self.chat.tools) if self.chat else set()
        names = self._tools.enabled_servers() if self._tools else []
        return [(n, n in used) for n in names]

    def set_chat_tool(self, server: str, on: bool) -> None:
        """Turn one tool server on or off for the open chat (kept with the chat)."""
        if self.chat is None:
            return
        tools = [n for n in self.chat.tools if n != server] + ([server] if on else [])
        self._store.set_chat_tools(self.chat.id, tools)
        self.chat.tools = tools
        self.chat_meta_changed.emit()

    def model_can_use_tools(self) -> bool | None:
        """Whether the open chat's model offers tools: None while its details are unknown."""
        info = self._models.info(self.model)
        if info is None or not info.details_loaded:
            return None
        return "tools" in info.capabilities

    def tools_refused(self) -> str:
        """Why the open chat's tool servers will not be used ('' when they will, or none
        is on)."""
        if not any(on for _n, on in self.tool_servers()):
            return ""
        if self.model_can_use_tools() is False:
            return no_tools_sentence(self.model)  # the CLI's words too
        return ""

    def _active_tool_servers(self) -> list[str]:
        if self.chat is None or self._tools is None or not self.model_can_use_tools():
            return []
        return [n for n, on in self.tool_servers() if on]

    def answer_approval(self, choice: str) -> None:
        """The user's answer on the approval card: ONCE, ALWAYS (this tool), SERVER (every
        tool of its server; both remembered by `ToolsController.policy`) or DENY."""
        reply = self._reply
        if not isinstance(reply, AgentReply) or reply.pending is None:
            return
        reply.answer(choice)

    def pending_approval(self) -> PendingCall | None:
        """The call of the open chat's reply that waits for the user, if any."""
        reply = self._reply
        if isinstance(reply, AgentReply) and self.chat and reply.chat_id == self.chat.id:
            return reply.pending
        return None

    # -- the request -------------------------------------------------------------------------

    def _body(self, model: str, path: list[Message]) -> dict[str, Any]:
        """The /api/chat request answering `path` on `model` (the chat's, or Compare's other)."""
        assert self.chat is not None
        info = self._models.info(model)
        think = self._settings().think if info and info.thinking else None
        runtime = self._settings().request_options()
        chat = replace(self.chat, model=model)
        return chat_body(chat, path, runtime, think, self.documents.message_text, self._pinned)
