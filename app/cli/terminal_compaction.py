"""`hearth run`'s compaction (history.compaction): before a question is answered, if the turn
would not fit the context, the oldest turns are summarised by the chat's own model and the
summary stands in for them; the user is told, `/summary` shows the summary and `/undo` puts
the original turns back into the prompt (a later turn that does not fit compacts again)."""

from __future__ import annotations

from typing import Any, TextIO

from ..client import HearthClient, reported_num_ctx
from ..history.compaction import (
    NOTICE,
    SUMMARY,
    estimate_tokens,
    fold,
    plan,
    summarise,
    would_overflow,
)
from .attachments import context_length

__all__ = ["TerminalCompaction", "fold"]


class TerminalCompaction:
    """The context bookkeeping of one interactive `hearth run` session."""

    def __init__(
        self, client: HearthClient, model: str, options: dict[str, Any], err: TextIO
    ) -> None:
        self.client, self.model, self.options, self.err = client, model, options, err
        self.num_ctx = context_length(client, model, options.get("num_ctx"))
        self.used = 0  # the last reply's whole prompt plus its answer (its final record)
        self.cut = False  # the service truncated or shifted the last prompt

    def on_final(self, final: dict[str, Any]) -> None:
        self.num_ctx = reported_num_ctx(final) or self.num_ctx  # what the service used
        extra = final.get("hearth") or {}
        prompt = extra.get("prompt_tokens", final.get("prompt_eval_count", 0))
        self.used = int(prompt or 0) + int(final.get("eval_count", 0) or 0)
        self.cut = bool(extra.get("truncated") or extra.get("shifted"))

    def before_reply(self, messages: list[dict[str, Any]]) -> bool:
        """Compact `messages` (ending with the question about to be answered) if the turn would
        not fit: a summary entry is appended after the question. True if it was."""
        question = str(messages[-1].get("content") or "")
        reserve = int(self.options.get("num_predict") or 0)
        if not would_overflow(self.num_ctx, self.used, question, reserve, self.cut):
            return False
        p = plan(messages, self.num_ctx)
        if p is None:
            return False
        text = summarise(p, self.num_ctx, self._ask)
        messages.append({"role": SUMMARY, "content": text, "covers": p.covers})
        self.err.write(
            f"({NOTICE}: {len(p.turns)} messages. /summary shows it, /undo restores them.)\n"
        )
        return True

    def _ask(self, messages: list[dict[str, Any]], num_predict: int) -> str:
        options = {**self.options, "num_predict": num_predict, "temperature": 0.0}
        body = {"model": self.model, "messages": messages, "options": options}
        return "".join(
            (item.get("message") or {}).get("content", "")
            for item in self.client.stream("/api/chat", body)
        )

    @staticmethod
    def _last(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
        return next((m for m in reversed(messages) if m.get("role") == SUMMARY), None)

    def show(self, messages: list[dict[str, Any]]) -> str:
        """The summary in force, as `/summary` prints it."""
        last = self._last(messages)
        if last is None:
            return "(nothing has been summarised)\n"
        state = " (undone: the original messages are in the prompt)" if last.get("undone") else ""
        return f"Summary of the first {last['covers']} messages{state}:\n{last['content']}\n"

    def undo(self, messages: list[dict[str, Any]]) -> str:
        """`/undo`: the last summary is taken back; the original turns go to the model again."""
        last = self._last(messages)
        if last is None or last.get("undone"):
            return "(no summary to undo)\n"
        last["undone"] = True
        # the originals count again: a next turn that does not fit is compacted anew
        self.used = sum(estimate_tokens(str(m.get("content") or "")) for m in fold(messages))
        self.cut = False
        return f"(the summary was undone: the first {last['covers']} messages are back)\n"
