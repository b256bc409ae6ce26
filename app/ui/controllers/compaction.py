"""The desktop app's compaction (history.compaction decides and builds the prompts): before
a question is answered, if the turn would not fit the chat's context, its oldest turns are
summarised by the chat's own model on a worker thread; the summary is stored as a message of
its own under the question (the reply goes under it), which the transcript shows as a notice
the user can expand and undo."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from ...history.compaction import (
    SUMMARY,
    Plan,
    plan,
    prompt_tokens,
    summarise,
    would_overflow,
)
from ...history.records import UNDONE, Message
from ..api_client import ApiClient, ApiError
from .model_turn import ModelTurn
from .request import chat_entries, context_used

__all__ = ["Compactor", "compaction_plan"]


def compaction_plan(
    path: list[Message],
    system_prompt: str,
    num_ctx: int,
    reserve: int,
    text_of: Callable[[Message], str],
    pinned: Callable[[Message], bool],
) -> Plan | None:
    """What to summarise before answering the last message of `path` (a question), or None
    when the turn fits: the last reply's final record says how full the context is (and
    whether the service had to cut it); after an undone summary, an estimate of the prompt."""
    if not path:
        return None
    entries = chat_entries(path, text_of, pinned)
    used = context_used(path)
    last_reply = next((i for i in range(len(path) - 1, -1, -1) if path[i].role == "assistant"), -1)
    if any(m.role == SUMMARY and m.state == UNDONE for m in path[last_reply + 1 :]):
        used = max(used, prompt_tokens(entries[:-1], system_prompt))
    stats = path[last_reply].stats if last_reply >= 0 else {}
    cut = bool(stats.get("truncated") or stats.get("shifted"))
    if not would_overflow(num_ctx, used, str(entries[-1].get("content") or ""), reserve, cut):
        return None
    return plan(entries, num_ctx)


class Compactor(QObject):
    """Runs one summarisation at a time off the GUI thread; `done(text, error)` on the GUI
    thread: the summary's text, or '' and a sentence."""

    done = Signal(str, str)

    def __init__(self, client: ApiClient, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._client = client
        self._turn: ModelTurn | None = None

    def start(self, p: Plan, model: str, num_ctx: int, options: dict[str, Any]) -> None:
        turn = self._turn = ModelTurn(self._client.client())

        def ask(messages: list[dict[str, Any]], num_predict: int) -> str:
            body = {
                "model": model,
                "messages": messages,
                "stream": True,
                "options": {**options, "num_predict": num_predict, "temperature": 0.0},
            }
            chunks = turn.run(body, lambda _piece, _thought: None)
            return "".join(str((c.get("message") or {}).get("content") or "") for c in chunks)

        def work() -> None:
            try:
                text, error = summarise(p, num_ctx, ask), ""
            except ApiError as e:
                text, error = "", str(e)
            except Exception as e:  # a bug must not leave the question unanswered
                text, error = "", f"{type(e).__name__}: {e}"
            self.done.emit(text, error)

        threading.Thread(target=work, name="summarise", daemon=True).start()

    def abort(self) -> None:
        if self._turn is not None:
            self._turn.abort()
