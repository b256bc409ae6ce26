"""What a chat request carries: the /api/chat body, and how much of the context it fills."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from ...history.compaction import SUMMARY, fold
from ...history.records import ERROR, UNDONE, Chat, Message

__all__ = ["chat_body", "chat_entries", "context_window", "context_used"]


def chat_body(
    chat: Chat,
    path: list[Message],
    runtime: dict[str, Any],
    think: bool | None,
    text_of: Callable[[Message], str] = lambda m: m.content,
    pinned: Callable[[Message], bool] = lambda m: False,
) -> dict[str, Any]:
    """The /api/chat request for `path` (root → the message being answered); `text_of` gives
    what a message says to the model (a question with its documents). The tool calls and
    results on it go too (Ollama's shape: an assistant's `tool_calls`, role "tool" messages
    with `tool_name`), so regenerating or editing resends them. A summary on the path
    (history.compaction) stands in for the messages it covers, except those `pinned` (a
    question carrying documents); the system prompt always goes."""
    messages = fold(chat_entries(path, text_of, pinned), chat.system_prompt)
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


def chat_entries(
    path: list[Message],
    text_of: Callable[[Message], str] = lambda m: m.content,
    pinned: Callable[[Message], bool] = lambda m: False,
) -> list[dict[str, Any]]:
    """`path` as history.compaction's entries: one per message, in order (so a summary's
    `covers` counts them), summaries and pinned questions marked."""
    entries: list[dict[str, Any]] = []
    for m in path:
        if m.role == SUMMARY:
            entries.append(
                {"role": SUMMARY, "content": m.content, "covers": m.covers}
                | ({"undone": True} if m.state == UNDONE else {})
            )
            continue
        if m.role == "assistant" and m.state == ERROR and not m.content:
            entries.append({"role": "assistant", "content": "", "drop": True})
            continue  # a failed reply has nothing to show the model
        entry: dict[str, Any] = {"role": m.role, "content": text_of(m)}
        if m.role == "assistant" and m.tool_calls:
            entry["tool_calls"] = [
                {"id": c.get("id"), "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in m.tool_calls
            ]
        if m.role == "tool":  # a call's result, as Ollama takes it back
            entry["tool_name"] = m.tool.get("name", "")
            if m.tool.get("call_id"):
                entry["tool_call_id"] = m.tool["call_id"]
        if m.images:
            entry["images"] = [base64.b64encode(img).decode("ascii") for img in m.images]
        if m.role == "user" and pinned(m):
            entry["pinned"] = True
        entries.append(entry)
    return entries


def context_used(path: list[Message]) -> int:
    """Tokens the conversation occupies: the last finished reply's prompt plus its answer."""
    for m in reversed(path):
        if m.role == "assistant" and m.stats.get("prompt_eval_count") is not None:
            prompt = m.stats.get("prompt_tokens", m.stats["prompt_eval_count"])
            return int(prompt) + int(m.stats.get("eval_count", 0))
    return 0


def context_window(
    chat: Chat, runtime: dict[str, Any], path: list[Message], trained: int, decided: int
) -> int:
    """The chat's context window as the service has it. Asked for (the chat's own num_ctx,
    else the app's setting): that, at most the model's trained length `trained`. Otherwise the
    service's own word: what it used for the last finished reply of the chat's model (its final
    record's num_ctx, kept in the reply's stats), else what it runs the model with when a
    request sets none (`decided`, /api/show's hearth.num_ctx); 4096 while it has said nothing
    (another kind of service)."""
    n = int(chat.options.get("num_ctx") or runtime.get("num_ctx") or 0)
    if n:
        return min(n, trained) if trained else n
    for m in reversed(path):
        if m.role == "assistant" and m.model == chat.model and m.stats.get("num_ctx"):
            return int(m.stats["num_ctx"])
    return decided or 4096
