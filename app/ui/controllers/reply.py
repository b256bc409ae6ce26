"""The numbers a reply reports: its clock while it streams (time to first token, thinking
time) and its stats once done, as stored and shown under it."""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import QCoreApplication

from ...client import reported_num_ctx

__all__ = ["ReplyClock", "reply_stats", "format_stats"]


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
