"""Compaction: when the next turn would not fit the context, the oldest turns are summarised
by the chat's own model and the summary stands in for them in the prompt. Qt-free and
HTTP-free; the desktop app (ui/controllers/compaction.py) and `hearth run` both use it.

The conversation is a list of entries in Ollama's /api/chat shape, root first (no system
message), as the history's path gives them, with three additions:

* a summary is an entry `{"role": "summary", "content": <text>, "covers": N}`: it stands for
  the first N entries of the list (earlier summaries included), and it sits where it was
  made (after the question it was made for), so the originals stay in the history, in order;
  an entry with `"undone": True` is a summary the user took back: it changes nothing;
* `"pinned": True` marks an entry that is never summarised away (a question carrying
  documents: their chips stay in the prompt as sent);
* `"drop": True` marks an entry that holds a place but says nothing to the model (a failed
  reply), so that positions, and hence `covers`, are those of the stored branch.

`fold` turns such a list into the prompt: the system prompt with the active summary (the last
one not undone) appended, the pinned entries it covers, then everything after what it covers.
`plan` decides what a new summary covers; `summarise` asks the model for it in batches that
each fit the context, with a bounded answer (`summary_tokens`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SUMMARY",
    "UNDONE",
    "NOTICE",
    "Plan",
    "estimate_tokens",
    "would_overflow",
    "prompt_tokens",
    "plan",
    "fold",
    "summary_tokens",
    "summary_request",
    "summarise",
]

SUMMARY = "summary"  # the role of a summary message in the history
UNDONE = "undone"  # the state of a summary the user took back
NOTICE = "Earlier messages were summarised to fit the context"

_HEADER = "Summary of the earlier conversation (the messages it replaces are not shown):"

# The summarisation instruction. Small models follow short, concrete rules best; the answer is
# also bounded by num_predict (summary_tokens), so it is asked to put what matters first.
INSTRUCTION = (
    "You summarise a conversation so that it can continue without its earlier messages. "
    "Write a short summary in plain sentences, most important first. Keep every name, "
    "number, date, fact, preference and decision stated, and every question still open. "
    "Say who said what (the user or the assistant). Do not add anything that was not said. "
    "Do not answer the questions. Write only the summary."
)


def estimate_tokens(text: str) -> int:
    """A cautious token count for text not yet sent (about 3 characters a token: tokenizers
    give English 4 or so, so this overestimates, which errs towards compacting early)."""
    return len(text) // 3 + 1


def _entry_text(entry: dict[str, Any]) -> str:
    return str(entry.get("content") or "")


def summary_tokens(num_ctx: int) -> int:
    """The most tokens a summary may take (its num_predict): a sixth of the context, within
    64..512, so that a summary and a fresh question always fit."""
    return max(64, min(512, num_ctx // 6))


def would_overflow(
    num_ctx: int,
    used: int,
    incoming: str,
    reserve: int | None = None,
    cut: bool = False,
) -> bool:
    """Whether the next turn would not fit: the tokens the conversation already holds (`used`:
    the last reply's whole prompt plus its answer, from its final record), the new question
    (estimated), and room for the answer (`reserve`, by default a quarter of the context)
    exceed `num_ctx`; or the service said it had to truncate or shift the last one (`cut`)."""
    room = num_ctx // 4 if reserve is None or reserve <= 0 else min(reserve, num_ctx // 2)
    return cut or used + estimate_tokens(incoming) + room > num_ctx


def prompt_tokens(entries: Sequence[dict[str, Any]], system_prompt: str = "") -> int:
    """An estimate of the prompt `entries` make (`fold`), for when no final record says it:
    after a summary was undone, the originals count again."""
    return sum(estimate_tokens(_entry_text(m)) + 4 for m in fold(entries, system_prompt))


def _active(entries: Sequence[dict[str, Any]]) -> int | None:
    """The index of the summary in force (the last one not undone), if any."""
    for i in range(len(entries) - 1, -1, -1):
        e = entries[i]
        if e.get("role") == SUMMARY and not e.get("undone"):
            return i
    return None


def _clean(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in ("pinned", "drop", "covers", "undone")}


def fold(entries: Sequence[dict[str, Any]], system_prompt: str = "") -> list[dict[str, Any]]:
    """The messages to send for `entries` (see the module docstring): the system prompt with
    the active summary, the pinned entries it covers, and the entries after what it covers;
    summaries, undone or not, never go as messages of their own."""
    at = _active(entries)
    covers = min(int(entries[at].get("covers", 0)), at) if at is not None else 0
    system = system_prompt if system_prompt.strip() else ""
    if at is not None:
        block = f"{_HEADER}\n{_entry_text(entries[at]).strip()}"
        system = f"{system}\n\n{block}" if system else block
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for i, e in enumerate(entries):
        if e.get("role") == SUMMARY or e.get("drop"):
            continue
        if i < covers and not e.get("pinned"):
            continue
        out.append(_clean(e))
    return out


@dataclass
class Plan:
    """What a new summary covers: the first `covers` entries; `previous` is the summary in
    force (its text goes into the new one) and `turns` the entries to summarise."""

    covers: int
    previous: str = ""
    turns: list[dict[str, Any]] = field(default_factory=list)


def plan(entries: Sequence[dict[str, Any]], num_ctx: int) -> Plan | None:
    """A new summary for `entries` (the last being the question about to be answered): it
    covers everything but the most recent entries that fit in a quarter of the context (at
    least the question itself), up to the last user question kept, so the kept part starts
    at a question. None when there is nothing new to summarise."""
    at = _active(entries)
    before = min(int(entries[at].get("covers", 0)), at) if at is not None else 0
    previous = _entry_text(entries[at]) if at is not None else ""
    budget = num_ctx // 4
    keep_from = len(entries) - 1
    spent = estimate_tokens(_entry_text(entries[-1])) if entries else 0
    while keep_from > before:
        cost = estimate_tokens(_entry_text(entries[keep_from - 1]))
        if spent + cost > budget:
            break
        spent += cost
        keep_from -= 1
    # the kept part starts at a user question (never a lone answer or tool result)
    while keep_from < len(entries) - 1 and entries[keep_from].get("role") != "user":
        keep_from += 1
    turns = [
        e
        for e in entries[before:keep_from]
        if e.get("role") != SUMMARY and not e.get("drop") and not e.get("pinned")
    ]
    if keep_from <= before or not turns:
        return None
    return Plan(keep_from, previous, turns)


def _line(entry: dict[str, Any], limit: int) -> str:
    who = {"user": "User", "assistant": "Assistant", "tool": "Tool result"}.get(
        str(entry.get("role")), str(entry.get("role"))
    )
    text = " ".join(_entry_text(entry).split())
    if len(text) > limit:  # one message larger than a batch: its start and its end
        half = max(1, limit // 2 - 3)
        text = f"{text[:half]} [...] {text[-half:]}"
    return f"{who}: {text}"


def summary_request(previous: str, lines: Sequence[str]) -> list[dict[str, Any]]:
    """The /api/chat messages that ask for a summary of `lines` ("User: ..." and
    "Assistant: ..." lines), folding in the summary so far."""
    parts = []
    if previous.strip():
        parts.append(f"Summary so far:\n{previous.strip()}")
    parts.append("Conversation:\n" + "\n".join(lines))
    parts.append("Write the summary now.")
    return [
        {"role": "system", "content": INSTRUCTION},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def summarise(p: Plan, num_ctx: int, ask: Callable[[list[dict[str, Any]], int], str]) -> str:
    """The summary for plan `p`, asked of the model through `ask(messages, num_predict)` (the
    caller's /api/chat call, returning the reply's text). Turns that do not fit one request
    (instruction, summary so far, answer) go in several, each folding in the last answer."""
    answer = summary_tokens(num_ctx)
    fixed = estimate_tokens(INSTRUCTION) + 32
    summary = p.previous
    pending = list(p.turns)
    while pending:
        room = max(64, num_ctx - fixed - answer - estimate_tokens(summary))
        limit = room * 3  # characters, as estimate_tokens counts them
        lines: list[str] = []
        used = 0
        while pending:
            line = _line(pending[0], limit)
            cost = estimate_tokens(line)
            if lines and used + cost > room:
                break
            lines.append(line)
            used += cost
            pending.pop(0)
        summary = ask(summary_request(summary, lines), answer).strip() or summary
    return summary
