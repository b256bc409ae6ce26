"""A reply while it streams (StreamingReply), and the numbers it reports once done."""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, Signal

from ...client import reported_num_ctx
from ...history import ChatStore
from ...history.records import DONE, ERROR, STOPPED
from ..api_client import ApiError, Call

__all__ = ["StreamingReply", "ReplyClock", "reply_stats", "format_stats"]


class StreamingReply(QObject):
    """The reply streaming into one assistant message: what it has said and thought so far,
    its time to first token and thinking time, and its request (to cancel).

    Every piece is committed to the history database before `grew` is emitted, so the screen
    never holds text the database lacks. `ended` comes exactly once (not after `abandon`); the
    final state is for the receiver to record, since an error's wording depends on the chat.
    """

    grew = Signal()  # `content` / `thinking` grew (already in the database)
    ended = Signal(str, object, object)  # DONE, STOPPED or ERROR; stats; ApiError (ERROR only)

    def __init__(
        self, store: ChatStore, message_id: int, chat_id: int, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self._store = store
        self.message_id = message_id
        self.chat_id = chat_id
        self.content = ""
        self.thinking = ""
        self.clock = ReplyClock()  # the clock starts now, before the request is sent
        self._call: Call | None = None

    def follow(self, call: Call) -> None:
        """Read the reply from `call` (a streamed /api/chat request)."""
        call.chunk.connect(self._on_chunk)
        call.done.connect(self._on_done)
        call.failed.connect(self._on_failed)
        self._call = call

    def cancel(self) -> None:
        """Stop the reply; `ended` follows with STOPPED."""
        if self._call is not None:
            self._call.cancel()

    def abandon(self) -> None:
        """At exit: stop reading and keep what came as it stands, marked stopped. No `ended`."""
        if self._call is not None:
            call, self._call = self._call, None
            call.failed.disconnect(self._on_failed)
            call.cancel()
            self._store.update_message(self.message_id, state=STOPPED)

    def _on_chunk(self, chunk: dict[str, Any]) -> None:
        msg = chunk.get("message") or {}
        piece, thought = str(msg.get("content") or ""), str(msg.get("thinking") or "")
        if not piece and not thought:
            return
        self.clock.piece(piece, thought)
        self.content += piece
        self.thinking += thought
        # Commit first, then show: the screen never holds text the database lacks.
        self._store.update_message(self.message_id, content=self.content, thinking=self.thinking)
        self.grew.emit()

    @property
    def ttft(self) -> float | None:
        return self.clock.ttft

    def _on_done(self, final: dict[str, Any]) -> None:
        self._end(DONE, self.clock.stats(final), None)

    def _on_failed(self, err: ApiError) -> None:
        stats = {"ttft": self.ttft} if self.ttft is not None else {}
        if err.kind == "cancelled":
            self._end(STOPPED, stats, None)
        else:
            self._end(ERROR, stats, err)

    def _end(self, state: str, stats: dict[str, Any], err: ApiError | None) -> None:
        self._call = None
        self.ended.emit(state, stats, err)


class ReplyClock:
    """The times a streamed model turn reports: to its first piece, and spent thinking (from
    the first thought to the first answer piece). Starts when made."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self.ttft: float | None = None
        self._think_start = 0.0
        self._think_s = 0.0

    def piece(self, piece: str, thought: str) -> None:
        """A piece of answer and/or thinking arrived."""
        now = time.monotonic()
        if self.ttft is None:
            self.ttft = now - self._t0
        if thought and not self._think_start:
            self._think_start = now
        if piece and self._think_start and not self._think_s:
            self._think_s = now - self._think_start  # the first answer token ends the thinking

    def thinking_seconds(self) -> float:
        if self._think_s:
            return self._think_s
        return time.monotonic() - self._think_start if self._think_start else 0.0

    def stats(self, final: dict[str, Any]) -> dict[str, Any]:
        """`reply_stats` of the turn's last chunk, with this clock's times."""
        return reply_stats(final, self.ttft, self.thinking_seconds())


def _hearth_extra(final: dict[str, Any]) -> dict[str, Any]:
    """Hearth's own fields in the last chunk (`"hearth": {...}`), empty from other services."""
    extra = final.get("hearth")
    return extra if isinstance(extra, dict) else {}


def _flag(final: dict[str, Any], *names: str) -> bool:
    extra = _hearth_extra(final)
    return any(bool(final.get(n) or extra.get(n)) for n in names)


def reply_stats(final: dict[str, Any], ttft: float | None, thinking_s: float) -> dict[str, Any]:
    """What the last chunk says (durations in ns) and the speed in tokens/s, plus the
    client-side time to first token and thinking time."""
    stats: dict[str, Any] = {
        k: final[k]
        for k in (
            "eval_count",
            "eval_duration",
            "prompt_eval_count",
            "prompt_eval_duration",
            "total_duration",
            "load_duration",
            "done_reason",
        )
        if k in final
    }
    if stats.get("eval_count") and stats.get("eval_duration"):
        stats["tokens_per_second"] = stats["eval_count"] / stats["eval_duration"] * 1e9
    if ttft is not None:
        stats["ttft"] = ttft
    if thinking_s:
        stats["thinking_seconds"] = thinking_s
    extra = _hearth_extra(final)
    if extra.get("prompt_tokens") is not None:
        # The whole prompt, cached part included (prompt_eval_count counts only new tokens).
        stats["prompt_tokens"] = int(extra["prompt_tokens"])
    if reported_num_ctx(final):  # the context the service fitted the prompt to
        stats["num_ctx"] = reported_num_ctx(final)
    stats["truncated"] = _flag(final, "truncated", "prompt_truncated")
    stats["shifted"] = _flag(final, "shifted", "context_shifted")
    return stats


def _tr(text: str) -> str:
    return QCoreApplication.translate("stats", text)


def format_stats(stats: dict[str, Any]) -> str:
    """One line under a reply: speed, time to first token, token counts, and what happened."""
    parts = []
    if stats.get("tokens_per_second"):
        parts.append(_tr("%1 tok/s").replace("%1", f"{stats['tokens_per_second']:.1f}"))
    if stats.get("ttft") is not None:
        parts.append(_tr("%1 s to first token").replace("%1", f"{stats['ttft']:.2f}"))
    if stats.get("eval_count") is not None:
        parts.append(_tr("%1 tokens").replace("%1", str(stats["eval_count"])))
    prompt = stats.get("prompt_tokens", stats.get("prompt_eval_count"))
    if prompt is not None:
        parts.append(_tr("prompt %1").replace("%1", str(prompt)))
    if stats.get("done_reason") == "length":
        parts.append(_tr("stopped at the max tokens"))
    if stats.get("truncated"):
        parts.append(_tr("prompt truncated to fit the context"))
    if stats.get("shifted"):
        parts.append(_tr("context shifted: the oldest turns were dropped"))
    return " · ".join(parts)
