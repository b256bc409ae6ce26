"""The open chat: open, create, close; send, stop, regenerate, edit into a branch, switch
versions; the images waiting to go with the next message.

Every reply is an AgentReply (agent_reply.py): hearth.agent's loop, with no tools when the
chat has no tool servers on (one model turn, as a plain reply), which commits every streamed
piece to the history database before the screen shows it, so a killed app keeps what was on
screen; ChatStore marks such a reply interrupted on next start. With tools, the same, plus
its tool calls (each asked for through `approval_needed`) and their results.
When the turn would not fit the context, the oldest turns are summarised first (compaction.py);
the summary is a message under the question, and the reply goes under it. With Compare on
(compare.py), the question is answered by two models side by side instead.

`ChatController` is built in layers, one concern each, every one a base of the next:
chat_state.py (the signals, the fields, the chats, the model, the context), chat_inputs.py
(images, documents, tool servers, the request), chat_compare.py (Compare's two replies),
chat_sending.py (send, compaction, the streamed reply, stop), and here the versions of a
branch (regenerate, edit into a branch, switch versions, undo a summary) and the messages an
MCP prompt adds (`send_messages`). Import the controller from here.
"""

from __future__ import annotations

import base64
from typing import Any

from ...history.chat_store import make_title
from ...history.compaction import SUMMARY
from ...history.records import DONE, UNDONE
from .chat_sending import ChatSending

__all__ = ["ChatController"]


class ChatController(ChatSending):
    """The open chat (see the module doc); its signals and fields are chat_state.py's."""

    # -- messages from elsewhere -------------------------------------------------------------

    def send_messages(self, messages: list[dict[str, Any]]) -> bool:
        """Messages from elsewhere (an MCP prompt: /api/chat's shape, images in base64) added
        to the chat in order; when the last is the user's, the model answers it as if typed."""
        if self.busy or not messages or self.documents.reading:
            return False
        if self.chat is None:
            self.new_chat()
        assert self.chat is not None
        earlier = self._store.path(self.chat.id)
        parent, last = self.chat.current_leaf, None
        for m in messages:
            images = [base64.b64decode(i) for i in m.get("images") or ()]
            role = "assistant" if m.get("role") == "assistant" else "user"
            last = self._store.add_message(
                self.chat.id, parent, role, str(m.get("content") or ""), images=images
            )
            parent = last.id
        assert last is not None
        self._store.set_auto_title(self.chat.id, make_title(last.content) or self.tr("Prompt"))
        if last.role == "user":
            self._prepare_reply(last, earlier)
        else:
            self._reload()
        self.chat_meta_changed.emit()
        return True

    # -- versions ----------------------------------------------------------------------------

    def set_summary_undone(self, message_id: int, undone: bool) -> bool:
        """Undo a summary (its original messages go to the model again) or use it again."""
        msg = self._store.message(message_id)
        if self.busy or msg is None or msg.role != SUMMARY:
            return False
        self._store.update_message(message_id, state=UNDONE if undone else DONE)
        self._reload()
        return True

    def regenerate(self, message_id: int | None = None) -> bool:
        """Answer the same question again; the new reply is a sibling version of the old."""
        if self.busy or self.chat is None:
            return False
        self._compare_with = ""  # (a question prepared for Compare in another chat never ran)
        target = self._store.message(message_id) if message_id else self._last("assistant")
        if target is None or target.role != "assistant" or target.parent_id is None:
            return False
        self._start_reply(target.parent_id)
        return True

    def edit_and_resend(self, message_id: int, text: str) -> bool:
        """Ask an edited question as a new branch; the original stays one ◀ away."""
        original = self._store.message(message_id)
        text = text.strip()
        if self.busy or self.chat is None or original is None or original.role != "user":
            return False
        if not text and not original.images:
            return False
        user = self._store.add_message(
            self.chat.id, original.parent_id, "user", text, images=original.images
        )
        self.documents.copy(original, user)
        self._prepare_reply(user, self._store.path(self.chat.id)[:-1])
        return True

    def switch_version(self, message_id: int, delta: int) -> bool:
        if self.busy or self.chat is None:
            return False
        sibs = self._store.siblings(message_id)
        if message_id not in sibs:
            return False
        i = sibs.index(message_id) + delta
        if not 0 <= i < len(sibs):
            return False
        self._store.select(self.chat.id, sibs[i])
        self._reload()
        return True
