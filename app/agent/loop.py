"""The agent loop: a model turn, the tool calls it made (each approved or denied), their
results back to the model, the next turn; until a turn calls no tool, the step limit, a
call the model repeats, or cancel.

The loop knows neither HTTP nor a screen: the caller gives it `step` (one model turn over the
service's /api/chat, streaming the text wherever it shows it), `approve` (asks the user, or
allows all) and `on_event` (shows or stores each turn, call and result in order). The messages
are Ollama's /api/chat shape; a result is appended as
`{"role": "tool", "content": text, "tool_name": qualified name, "tool_call_id": id,
"images": [base64, ...]}`, which Hearth's service renders through the model's chat template
with the images as images (a vision model sees them).

Every turn ends: the callers' steps cap its length (`turn_options`: `TURN_TOKENS` when the
request sets no `num_predict`), and a model that makes again the very call (the same tool, the
same arguments) whose result it already has in this run is not run again: the loop stops
("repeated"), since a greedy model that wrote the same call after its result would only write
it again.
"""

from __future__ import annotations

import enum
import itertools
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .specs import DEFAULT_MAX_STEPS, ToolResult, ToolSpec, error_result

_log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_STEPS",
    "TURN_TOKENS",
    "AgentEvent",
    "AgentOutcome",
    "Approve",
    "ChatStep",
    "Decision",
    "StepReply",
    "ToolCall",
    "ToolCaller",
    "no_tools_sentence",
    "offers_tools",
    "repeated_sentence",
    "run_agent",
    "turn_options",
]

TURN_TOKENS = 4096  # an agent turn's num_predict when the request sets none


def turn_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """A model turn's options: `options` with num_predict TURN_TOKENS when they set none (a
    turn never runs without end: unset, the service would allow 10 x num_ctx tokens)."""
    out = dict(options or {})
    if out.get("num_predict") is None:
        out["num_predict"] = TURN_TOKENS
    return out


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: `id` (the service's, or one the loop gives), the qualified
    tool name it called, and its arguments."""

    id: str
    name: str
    arguments: dict[str, Any]

    def as_message_call(self) -> dict[str, Any]:
        """The call as an assistant message's `tool_calls` entry (Ollama's shape)."""
        return {"id": self.id, "function": {"name": self.name, "arguments": self.arguments}}


_ids = itertools.count(1)


@dataclass
class StepReply:
    """One model turn: its text, thinking, tool calls and the final stats record."""

    content: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_chunks(cls, chunks: Sequence[Mapping[str, Any]]) -> StepReply:
        """A turn from /api/chat's NDJSON objects (or one non-streamed answer): contents and
        thinking joined, tool calls gathered from every chunk, the `done` object as stats."""
        content, thinking, calls, stats = [], [], [], {}
        for chunk in chunks:
            message = chunk.get("message") or {}
            content.append(message.get("content") or "")
            thinking.append(message.get("thinking") or "")
            for raw in message.get("tool_calls") or []:
                fn = raw.get("function") or {}
                args = fn.get("arguments")
                calls.append(
                    ToolCall(
                        str(raw.get("id") or f"call_{next(_ids)}"),
                        str(fn.get("name", "")),
                        dict(args) if isinstance(args, Mapping) else {},
                    )
                )
            if chunk.get("done"):
                stats = {k: v for k, v in chunk.items() if k != "message"}
        return cls("".join(content), "".join(thinking), calls, stats)


ChatStep = Callable[[list[dict[str, Any]], list[dict[str, Any]]], StepReply]
"""`step(messages, tools)`: one model turn over `messages` offering `tools` (the
`ToolSpec.as_chat_tool()` list); streams its text to the caller's screen; returns the turn."""


class Decision(enum.Enum):
    ALLOW_ONCE = "allow_once"
    ALLOW_ALWAYS = "allow_always"  # always allow this tool (of this server)
    ALLOW_SERVER = "allow_server"  # always allow every tool of this server
    DENY = "deny"


Approve = Callable[[ToolCall, ToolSpec], Decision]
"""Asked before each call; remembering "always" is the caller's (`approvals.policy_approve`;
the loop passes every call to it). Only ALLOW_ONCE, ALLOW_ALWAYS and ALLOW_SERVER run the
call (see `_ask`)."""

_ALLOWING = (Decision.ALLOW_ONCE, Decision.ALLOW_ALWAYS, Decision.ALLOW_SERVER)


def _ask(approve: Approve, call: ToolCall, spec: ToolSpec) -> Decision:
    """`approve`'s decision on `call`, failing closed: only an explicit ALLOW_ONCE,
    ALLOW_ALWAYS or ALLOW_SERVER allows it; anything else (DENY, None, a string, another
    value) or an exception raised by `approve` is DENY (the exception is logged)."""
    try:
        decision = approve(call, spec)
    except Exception:
        _log.exception("asking to approve the call to %r failed: the call is denied", call.name)
        return Decision.DENY
    return decision if any(decision is d for d in _ALLOWING) else Decision.DENY


class ToolCaller(Protocol):
    """What the loop needs of a `ToolHub` (tests may give another)."""

    def call(
        self,
        qualified_name: str,
        arguments: Mapping[str, Any] | None = None,
        cancel: threading.Event | None = None,
    ) -> ToolResult: ...


EventKind = Literal["assistant", "call", "result"]


@dataclass
class AgentEvent:
    """What just happened, in order: an assistant turn (`message`, the one appended), then for
    each of its calls a "call" event (`call`, `spec`: None for a tool not offered, `decision`:
    None when the user was not asked: a tool not offered, or the chat stopped) followed by its
    "result" event (`result`, and `message`: the tool message appended). `step` counts model
    turns from 1."""

    kind: EventKind
    step: int
    message: dict[str, Any] | None = None
    call: ToolCall | None = None
    spec: ToolSpec | None = None
    decision: Decision | None = None
    result: ToolResult | None = None


StopReason = Literal["answered", "step_limit", "repeated", "cancelled"]


@dataclass
class AgentOutcome:
    """How the run ended: `reason`, the model turns taken (`steps`), the last turn's text
    (`content`), the whole conversation (`messages`: the caller's, then `added`); with
    "repeated", the call the model made again (`repeated`)."""

    reason: StopReason
    steps: int
    content: str
    messages: list[dict[str, Any]]
    added: list[dict[str, Any]]
    repeated: ToolCall | None = None


def repeated_sentence(call: ToolCall) -> str:
    """What the CLI and the app say when the loop stopped at a repeated call."""
    args = json.dumps(call.arguments, ensure_ascii=False)
    return (
        f"Stopped: the model called {call.name} again with the same arguments ({args}) after "
        "it already had that call's result."
    )


def _assistant_message(reply: StepReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.thinking:
        message["thinking"] = reply.thinking
    if reply.tool_calls:
        message["tool_calls"] = [c.as_message_call() for c in reply.tool_calls]
    return message


def _tool_message(call: ToolCall, result: ToolResult, images: bool) -> dict[str, Any]:
    text = result.text
    message: dict[str, Any] = {
        "role": "tool",
        "content": text,
        "tool_name": call.name,
        "tool_call_id": call.id,
    }
    if result.images:
        if images:
            message["images"] = result.images_base64()
        else:
            note = f"[{len(result.images)} image(s) omitted: this model cannot see images]"
            message["content"] = f"{text}\n{note}" if text else note
    return message


def run_agent(
    step: ChatStep,
    hub: ToolCaller,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[ToolSpec],
    approve: Approve,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    cancel: threading.Event | None = None,
    on_event: Callable[[AgentEvent], None] | None = None,
    images: bool = True,
) -> AgentOutcome:
    """Run the loop from `messages` (not changed; the outcome has the new list).

    Each turn: `step(messages, [t.as_chat_tool() for t in tools])`; no tool calls ends the run
    ("answered"). Otherwise each call is approved (`approve`; a call to a tool not in `tools`
    is refused without asking), run on `hub` (a denial is an error result saying so) and its
    result appended; then the next turn. After `max_steps` turns that called tools, the run
    ends ("step_limit") with every call answered, so the conversation can go on. A call the
    same as one already run in this run (tool and arguments) is not run again: it is
    answered with a sentence saying so, the turn's other calls run, and the run ends
    ("repeated", the call in `repeated`). `cancel`
    (checked between turns and calls, and passed to the running call) ends it ("cancelled");
    calls not run get a result saying so. `images=False` (a model without vision) turns a
    result's images into a note in its text."""
    if max_steps < 1:
        raise ValueError("max_steps must be at least 1")
    convo = [dict(m) for m in messages]
    start = len(convo)
    chat_tools = [t.as_chat_tool() for t in tools]
    offered = {t.qualified_name: t for t in tools}

    def emit(event: AgentEvent) -> None:
        if on_event is not None:
            on_event(event)

    def stopped() -> bool:
        return cancel is not None and cancel.is_set()

    def outcome(
        reason: StopReason, steps: int, content: str, repeat: ToolCall | None = None
    ) -> AgentOutcome:
        return AgentOutcome(reason, steps, content, convo, convo[start:], repeat)

    content = ""
    answered: list[tuple[str, dict[str, Any]]] = []  # the calls answered in this run
    repeat: ToolCall | None = None
    for turn in range(1, max_steps + 1):
        if stopped():
            return outcome("cancelled", turn - 1, content)
        reply = step(convo, chat_tools)
        content = reply.content
        message = _assistant_message(reply)
        convo.append(message)
        emit(AgentEvent("assistant", turn, message=message))
        if not reply.tool_calls:
            return outcome("cancelled" if stopped() else "answered", turn, content)
        for call in reply.tool_calls:
            spec = offered.get(call.name)
            halted = stopped()
            again = (call.name, call.arguments) in answered
            ask = not halted and not again
            decision = _ask(approve, call, spec) if spec is not None and ask else None
            emit(AgentEvent("call", turn, call=call, spec=spec, decision=decision))
            answered.append((call.name, call.arguments))
            if again:
                repeat = repeat or call
                result = error_result(
                    "the call was not run again: the same call with the same arguments was "
                    "already made, and its result is above"
                )
            elif halted:
                result = error_result("the call was not run: the user stopped the chat")
            elif spec is None:
                names = ", ".join(offered) or "none"
                result = error_result(f"there is no tool '{call.name}'; the tools offered: {names}")
            elif decision not in _ALLOWING:
                result = error_result(f"the user denied the call to '{call.name}'")
            else:
                result = hub.call(call.name, call.arguments, cancel)
            tool_message = _tool_message(call, result, images)
            convo.append(tool_message)
            emit(
                AgentEvent(
                    "result",
                    turn,
                    message=tool_message,
                    call=call,
                    spec=spec,
                    decision=decision,
                    result=result,
                )
            )
        if stopped():
            return outcome("cancelled", turn, content)
        if repeat is not None:
            return outcome("repeated", turn, content, repeat)
    return outcome("step_limit", max_steps, content)


def offers_tools(show: Mapping[str, Any]) -> bool:
    """Whether a model can be offered tools, from the service's /api/show answer: its
    `capabilities` include "tools" (the service reads that from the chat template); an older
    answer without capabilities falls back to its `template` mentioning `tools`."""
    caps = show.get("capabilities")
    if isinstance(caps, list):
        return "tools" in caps
    return "tools" in str(show.get("template") or "")


def no_tools_sentence(model: str) -> str:
    """What the GUI and CLI say for a model `offers_tools` is False for."""
    return (
        f"{model} cannot use tools: its chat template has no place for them. "
        "Pick a model whose template supports tools (e.g. Qwen 3, Llama 3.1+, Mistral)."
    )
