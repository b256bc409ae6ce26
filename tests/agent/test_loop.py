"""The agent loop with a scripted model turn (`ChatStep`) and a real MCP server: calls run
with the model's arguments after approval, results go back as tool messages, denial, unknown
tools, the step limit, cancel, and images for vision models (a note for the others)."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from hearth.agent.config import parse_config
from hearth.agent.hub import ToolHub, ToolSpec
from hearth.agent.loop import (
    TURN_TOKENS,
    AgentEvent,
    Decision,
    StepReply,
    ToolCall,
    no_tools_sentence,
    offers_tools,
    repeated_sentence,
    run_agent,
    turn_options,
)

from .helpers import stdio_entry
from .mcp_server import picture_png

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolHub]:
    config = parse_config({"mcpServers": {"t": stdio_entry()}})
    with ToolHub(config, log_dir=tmp_path_factory.mktemp("logs")) as h:
        yield h


@pytest.fixture(scope="module")
def tools(hub: ToolHub) -> list[ToolSpec]:
    return hub.tools()


class Script:
    """A model whose turns are given: each a list of (tool, arguments) calls, or text."""

    def __init__(self, *turns: list[tuple[str, dict[str, Any]]] | str) -> None:
        self.turns = list(turns)
        self.seen: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> StepReply:
        self.seen.append(([dict(m) for m in messages], tools))
        turn = self.turns[min(len(self.seen), len(self.turns)) - 1]
        if isinstance(turn, str):
            return StepReply(content=turn)
        calls = [ToolCall(f"c{len(self.seen)}_{i}", n, a) for i, (n, a) in enumerate(turn)]
        return StepReply(content="", tool_calls=calls)


def allow(call: ToolCall, spec: ToolSpec) -> Decision:
    return Decision.ALLOW_ONCE


def test_a_call_runs_with_the_models_arguments_and_its_result_reaches_the_next_turn(hub, tools):
    script = Script([("t__echo", {"text": "from the model"})], "done")
    events: list[AgentEvent] = []
    out = run_agent(script, hub, USER, tools, allow, on_event=events.append)
    assert (out.reason, out.steps, out.content) == ("answered", 2, "done")
    assert [e.kind for e in events] == ["assistant", "call", "result", "assistant"]
    assert events[1].decision is Decision.ALLOW_ONCE and events[1].spec.name == "echo"
    assert events[2].result.text == "echo: from the model"
    second_messages, offered = script.seen[1]
    assert second_messages[-1] == {
        "role": "tool",
        "content": "echo: from the model",
        "tool_name": "t__echo",
        "tool_call_id": "c1_0",
    }
    assert second_messages[-2]["tool_calls"] == [
        {"id": "c1_0", "function": {"name": "t__echo", "arguments": {"text": "from the model"}}}
    ]
    assert {t["function"]["name"] for t in offered} == {t.qualified_name for t in tools}
    assert out.messages[:1] == USER and out.added == out.messages[1:] and len(out.added) == 3
    assert USER == [{"role": "user", "content": "hi"}]  # the caller's list is not changed


def test_a_denied_call_is_not_run_and_the_model_is_told(hub, tools):
    ran: list[str] = []

    class Counting:
        def call(self, name, arguments=None, cancel=None):
            ran.append(name)
            return hub.call(name, arguments, cancel)

    script = Script([("t__pid", {}), ("t__echo", {"text": "x"})], "ok")
    asked: list[str] = []

    def approve(call: ToolCall, spec: ToolSpec) -> Decision:
        asked.append(spec.name)
        return Decision.DENY if spec.name == "pid" else Decision.ALLOW_ALWAYS

    out = run_agent(script, Counting(), USER, tools, approve)
    assert asked == ["pid", "echo"] and ran == ["t__echo"]
    denied, allowed = out.added[1], out.added[2]
    assert denied["content"] == "the user denied the call to 't__pid'"
    assert allowed["content"] == "echo: x"


def test_a_tool_not_offered_is_refused_without_asking(hub, tools):
    script = Script([("t__rm_rf", {})], "ok")
    events: list[AgentEvent] = []
    out = run_agent(
        script, hub, USER, tools[:2], lambda c, s: pytest.fail("asked"), on_event=events.append
    )
    assert [(e.kind, e.spec, e.decision) for e in events[1:3]] == [
        ("call", None, None),
        ("result", None, None),
    ]
    assert (
        out.added[1]["content"] == "there is no tool 't__rm_rf'; the tools offered: t__echo, t__add"
    )


def test_the_loop_stops_at_the_step_limit_with_every_call_answered(hub, tools):
    script = Script(*[[("t__echo", {"text": f"again {n}"})] for n in range(5)])  # calls on
    out = run_agent(script, hub, USER, tools, allow, max_steps=3)
    assert (out.reason, out.steps) == ("step_limit", 3) and len(script.seen) == 3
    assert [m["role"] for m in out.added] == ["assistant", "tool"] * 3
    assert out.added[-1]["content"] == "echo: again 2"


def test_cancel_stops_the_loop_and_the_running_call(hub, tools):
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    script = Script([("t__hang", {"seconds": 3600}), ("t__echo", {"text": "never"})], "no")
    out = run_agent(script, hub, USER, tools, allow, cancel=cancel)
    assert out.reason == "cancelled" and len(script.seen) == 1
    assert out.added[1]["content"] == "the call to 't__hang' was cancelled"
    assert out.added[2]["content"] == "the call was not run: the user stopped the chat"
    assert hub.call("t__echo", {"text": "after"}).text == "echo: after"


def test_cancel_during_a_model_turn_ends_the_run_as_cancelled(hub, tools):
    cancel = threading.Event()

    def step(messages, offered):
        cancel.set()  # the user stopped it while the model was writing
        return StepReply(content="partial", tool_calls=[ToolCall("c1", "t__echo", {"text": "x"})])

    out = run_agent(step, hub, USER, tools, lambda c, s: pytest.fail("asked"), cancel=cancel)
    assert (out.reason, out.content) == ("cancelled", "partial")
    assert out.added[1]["content"] == "the call was not run: the user stopped the chat"
    plain = run_agent(
        lambda m, t: StepReply(content="half"), hub, USER, tools, allow, cancel=cancel
    )
    assert (plain.reason, plain.steps) == ("cancelled", 0)  # already stopped: no turn at all


def test_images_go_to_a_vision_model_as_images_and_to_others_as_a_note(hub, tools):
    out = run_agent(Script([("t__picture", {})], "seen"), hub, USER, tools, allow)
    assert out.added[1]["images"] == [base64.b64encode(picture_png()).decode()]
    blind = run_agent(Script([("t__picture", {})], "x"), hub, USER, tools, allow, images=False)
    assert "images" not in blind.added[1]
    assert "1 image(s) omitted: this model cannot see images" in blind.added[1]["content"]


def test_a_streamed_reply_is_one_turn():
    chunks = [
        {"message": {"role": "assistant", "content": "Let me ", "thinking": "hm"}, "done": False},
        {"message": {"role": "assistant", "content": "check."}, "done": False},
        {
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "call_1", "function": {"name": "t__echo", "arguments": {"text": "a"}}}
                ],
            },
            "done": True,
            "eval_count": 7,
        },
    ]
    reply = StepReply.from_chunks(chunks)
    assert (reply.content, reply.thinking) == ("Let me check.", "hm")
    assert reply.tool_calls == [ToolCall("call_1", "t__echo", {"text": "a"})]
    assert reply.stats["eval_count"] == 7 and reply.stats["done"] is True


def test_whether_a_model_offers_tools():
    assert offers_tools({"capabilities": ["completion", "tools"]})
    assert not offers_tools({"capabilities": ["completion", "vision"]})
    assert offers_tools({"template": "{% if tools %}...{% endif %}"})
    assert "gemma3:270m cannot use tools" in no_tools_sentence("gemma3:270m")


def test_a_call_repeated_with_the_same_arguments_stops_the_loop(hub, tools):
    """The model calls echo("x") again after it has its result: not run again, answered with a
    sentence (the conversation can go on), the run ends "repeated" well before the step limit;
    a call with other arguments runs."""
    same = [("t__echo", {"text": "x"})]
    script = Script(same, [("t__echo", {"text": "y"})], same, "never reached")
    events: list[AgentEvent] = []
    out = run_agent(script, hub, USER, tools, allow, max_steps=10, on_event=events.append)
    assert (out.reason, out.steps) == ("repeated", 3)
    assert out.repeated is not None and out.repeated.arguments == {"text": "x"}
    results = [e.result for e in events if e.kind == "result"]
    assert [r.text for r in results[:2]] == ["echo: x", "echo: y"]
    assert results[2].is_error and "not run again" in results[2].text
    calls = [e for e in events if e.kind == "call"]
    assert calls[2].decision is None  # the user is not asked for a call that is not run
    assert out.added[-1]["role"] == "tool" and out.added[-1]["tool_call_id"] == "c3_0"
    assert "called t__echo again with the same arguments" in repeated_sentence(out.repeated)


def test_every_turn_is_capped_unless_the_request_sets_its_length():
    assert turn_options(None) == {"num_predict": TURN_TOKENS}
    assert turn_options({"temperature": 0}) == {"temperature": 0, "num_predict": TURN_TOKENS}
    assert turn_options({"num_predict": 12}) == {"num_predict": 12}
