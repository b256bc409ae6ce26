"""Compare's side of the open chat (`ChatCompare`, a layer of `chat.ChatController` over
chat_inputs.py): a question prepared while Compare names a second model (`_compare_with`, taken
from the compare bar when the question is sent) is answered by both models side by side
(compare.py's `CompareController`, no tools) instead of by one reply; `continue_with` goes on
with either reply, whose model becomes the chat's.
"""

from __future__ import annotations

from typing import Any

from ...history import Message
from .chat_inputs import ChatInputs

__all__ = ["ChatCompare"]


class ChatCompare(ChatInputs):
    """Two replies side by side, and going on with one (see the module doc)."""

    def _connect(self) -> None:
        super()._connect()
        self.compare.finished.connect(self._on_compared)

    def _start_comparison(self, user_id: int, path: list[Message], body: dict[str, Any]) -> bool:
        """When the question `user_id` (the last of `path`) was prepared for Compare, start
        its two replies (`body` the chat's model's request, on the left) and say True; False
        when it is answered by one reply. The second model is used once either way."""
        assert self.chat is not None
        other, self._compare_with = self._compare_with, ""
        if not other:
            return False
        if self._active_tool_servers():
            self.notice.emit("info", self.tr("Compared replies do not use tools."))
        self.compare.start(self.chat.id, user_id, [body, self._body(other, path)])
        self._reload()
        self.busy_changed.emit(True)
        return True

    def continue_with(self, message_id: int) -> bool:
        """Go on with reply `message_id` of a comparison (Compare): its branch goes on screen
        and its model becomes the chat's."""
        msg = self._store.message(message_id)
        if self.busy or self.chat is None or msg is None or msg.chat_id != self.chat.id:
            return False
        self._store.select(self.chat.id, message_id)
        self._switch_model(msg.model)
        self._reload()
        return True

    def _on_compared(self, chat_id: int, _states: dict[int, str]) -> None:
        if self.chat is not None and self.chat.id == chat_id:
            self._reload()
        self.busy_changed.emit(False)
        self.chat_meta_changed.emit()
