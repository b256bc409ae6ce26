"""Compare: one question answered by two models side by side, then the chat goes on with either
reply.

The chat controller stores the question (with its images, documents and any summary, as for
any question) and, when a second model was picked (`other`, set by the compare bar; one
question only), hands the reply to `start` with one /api/chat body per model. Each reply is
an assistant message under the same parent (siblings, so versions of the reply to it), marked
with its column (`Message.compare`, schema 6); the left one, the chat's own model, is on the
chat's branch until the user continues with the other (ChatController.continue_with). Both
requests go out at once, each an AgentReply offered no tools (the app's one reply path, on
a worker thread: nothing blocks the window); the service runs them side by side, or one
after the other when it has room for one model only. Each streams into its column as a
reply does into the transcript: every piece committed to the history before it is shown,
its figures (tokens/s, time to first token) recorded when it ends. `stop` stops both.

The transcript shows a compared reply as a CompareView (widgets/compare_view.py): `extras`
gives the row on the branch its comparison's columns (`MessageItem.compared`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from PySide6.QtCore import QObject, Signal

from ...history import ChatStore, Message
from ...history.records import STREAMING
from ..api_client import ApiClient, ApiError
from ..item_models.conversation import ConversationModel, MessageItem
from .agent_reply import AgentReply, no_grants
from .errors import friendly_error
from .model_turn import ModelTurn

__all__ = ["CompareController"]


class CompareController(QObject):
    """The comparison being written (at most one at a time) and the model the next question
    also goes to. `extras(message)` are a compared reply's columns for the transcript."""

    other_changed = Signal(str)  # the second model for the next question ('' : Compare is off)
    finished = Signal(int, object)  # chat id, {message id: final state} by column, once all ended

    def __init__(
        self,
        store: ChatStore,
        client: ApiClient,
        conversation: ConversationModel,
        extras: Callable[[Message], dict[str, Any]],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._store = store
        self._client = client
        self._conversation = conversation
        self._extras = extras  # what a reply shows besides its text (its sources)
        self.other = ""
        self._replies: dict[int, AgentReply] = {}  # by message id, while they stream
        self._columns: list[MessageItem] = []  # the comparison being written, by column
        self._states: dict[int, str] = {}
        self.chat_id = 0

    @property
    def busy(self) -> bool:
        return bool(self._replies)

    def set_other(self, model: str) -> None:
        """Send the next question to `model` too ('' turns Compare off)."""
        if model != self.other:
            self.other = model
            self.other_changed.emit(model)

    def take_other(self, model: str) -> str:
        """The second model for a question the chat's `model` answers ('' when Compare is off
        or names the same model); Compare is off afterwards (one question at a time)."""
        other = self.other
        self.set_other("")
        return other if other != model else ""

    # -- the transcript --------------------------------------------------------------------------

    def column_item(self, message: Message) -> MessageItem:
        """A column of a comparison as the transcript shows it (its sources, no versions)."""
        item = replace(MessageItem.from_message(message), **self._extras(message))
        item.version = item.versions = 1
        return item

    def extras(self, message: Message) -> dict[str, Any]:
        """For a compared reply: `compared`, its comparison's columns (streaming ones as they
        stand), so the transcript shows them side by side."""
        if not message.compare:
            return {}
        if message.chat_id == self.chat_id and any(c.id == message.id for c in self._columns):
            return {"compared": [replace(c) for c in self._columns]}
        return {"compared": [self.column_item(m) for m in self._store.comparison(message.id)]}

    # -- writing -------------------------------------------------------------------------------

    def start(self, chat_id: int, parent_id: int, bodies: list[dict[str, Any]]) -> list[int]:
        """Add one streaming reply per request body under `parent_id` (columns in order, the
        first on the chat's branch) and send every request at once; their ids."""
        assert not self._replies, "one comparison at a time"
        self.chat_id = chat_id
        messages = [
            self._store.add_message(
                chat_id, parent_id, "assistant", model=str(body["model"]), state=STREAMING,
                compare=column,
            )
            for column, body in enumerate(bodies, start=1)
        ]  # fmt: skip
        self._store.set_leaf(chat_id, messages[0].id)
        self._columns = [self.column_item(m) for m in messages]
        self._states = {}
        for message, body in zip(messages, bodies, strict=True):
            reply = AgentReply(
                self._store, chat_id, message.id, body, ModelTurn(self._client.client()),
                None, [], no_grants, 1, parent=self,
            )  # fmt: skip
            reply.grew.connect(lambda r=reply: self._on_grew(r))
            reply.ended.connect(
                lambda state, stats, err, r=reply: self._on_ended(r, state, stats, err)
            )
            self._replies[message.id] = reply
        for reply in self._replies.values():
            reply.start()
        return [m.id for m in messages]

    def stop(self) -> None:
        """Stop both replies (each ends STOPPED, keeping what it wrote)."""
        for reply in list(self._replies.values()):
            reply.cancel()

    def abandon(self) -> None:
        """At exit: keep both replies as they stand, marked stopped."""
        replies, self._replies = list(self._replies.values()), {}
        for reply in replies:
            reply.abandon()

    def _column(self, message_id: int) -> MessageItem | None:
        return next((c for c in self._columns if c.id == message_id), None)

    def _show(self) -> None:
        """Give the row on screen (the column on the branch) the columns as they stand."""
        for column in self._columns:
            if self._conversation.row_of(column.id) >= 0:
                compared = [replace(c) for c in self._columns]
                self._conversation.update(column.id, compared=compared)
                return

    def _on_grew(self, reply: AgentReply) -> None:
        column = self._column(reply.message_id)
        if column is not None:
            column.content, column.thinking = reply.content, reply.thinking
            self._show()

    def _on_ended(
        self, reply: AgentReply, state: str, stats: dict[str, Any], err: ApiError | None
    ) -> None:
        column = self._column(reply.message_id)
        model = column.model if column else ""
        error = friendly_error(err, model) if err is not None else ""
        self._store.update_message(reply.message_id, state=state, stats=stats, error=error)
        if column is not None:
            column.state, column.stats, column.error = state, dict(stats), error
            column.thinking_seconds = float(stats.get("thinking_seconds", 0.0))
        self._states[reply.message_id] = state
        self._replies.pop(reply.message_id, None)
        reply.deleteLater()
        self._show()
        if not self._replies:
            states = {c.id: self._states[c.id] for c in self._columns}  # by column
            self._states, self._columns = {}, []
            self.finished.emit(self.chat_id, states)
