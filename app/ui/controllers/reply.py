"""Pure helpers for a chat request: the /api/chat body, and the numbers a reply reports."""

from __future__ import annotations

import base64
from typing import Any

from PySide6.QtCore import QCoreApplication

from ...history.records import ERROR, Chat, Message

__all__ = ["chat_body", "reply_stats", "context_window", "context_used", "format_stats"]


def chat_body(
    chat: Chat, path: list[Message], runtime: dict[str, Any], think: bool | None
) -> dict[str, Any]:
    """The /api/chat request for `path` (root → the user message being answered)."""
    messages: list[dict[str, Any]] = []
    if chat.system_prompt.strip():
        messages.append({"role": "system", "content": chat.system_prompt})
    for m in path:
        if m.role == "assistant" and m.state == ERROR and not m.content:
            continue  # a failed reply has nothing to show the model
        entry: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.images:
            entry["images"] = [base64.b64encode(img).decode("ascii") for img in m.images]
        messages.append(entry)
    # Per-chat overrides sit on top of the app's runtime settings; the service applies the
    # model's own defaults under both.
    options = {**runtime, **{k: v for k, v in chat.options.items() if v is not None}}
    body: dict[str, Any] = {
        "model": chat.model,
        "messages": messages,
        "stream": True,
        "options": options,
    }
    if think is not None:
        body["think"] = think
    return body


def _flag(final: dict[str, Any], *names: str) -> bool:
    extra = final.get("hearth") if isinstance(final.get("hearth"), dict) else {}
    return any(bool(final.get(n) or extra.get(n)) for n in names)


def reply_stats(final: dict[str, Any], ttft: float | None, thinking_s: float) -> dict[str, Any]:
    """What the last chunk says (durations in ns), plus the client-side time to first token."""
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
    extra = final.get("hearth") if isinstance(final.get("hearth"), dict) else {}
    if extra.get("prompt_tokens") is not None:
        # The whole prompt, cached part included (prompt_eval_count counts only new tokens).
        stats["prompt_tokens"] = int(extra["prompt_tokens"])
    stats["truncated"] = _flag(final, "truncated", "prompt_truncated")
    stats["shifted"] = _flag(final, "shifted", "context_shifted")
    return stats


def context_used(path: list[Message]) -> int:
    """Tokens the conversation occupies: the last finished reply's prompt plus its answer."""
    for m in reversed(path):
        if m.role == "assistant" and m.stats.get("prompt_eval_count") is not None:
            prompt = m.stats.get("prompt_tokens", m.stats["prompt_eval_count"])
            return int(prompt) + int(m.stats.get("eval_count", 0))
    return 0


def context_window(chat: Chat, runtime: dict[str, Any], model_ctx: int) -> int:
    n = int(chat.options.get("num_ctx") or runtime.get("num_ctx") or 0)
    if model_ctx and (not n or n > model_ctx):
        n = model_ctx
    return n or 4096


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
