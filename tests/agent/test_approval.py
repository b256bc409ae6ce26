"""Approval fails closed, and the name the user approves is the tool that runs.

Only an explicit ALLOW_ONCE / ALLOW_ALWAYS runs a call: any other answer (a string, None, an
exception raised while asking) denies it. Two servers whose names differ only in punctuation
("a.b", "a_b": the model sees both as `a_b__…`) are both refused with a sentence, so the
approval can never name one server's tool while the other's runs; real servers, written with
the mcp SDK (`mcp_server.py`), record which of them a call reached."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from hearth.agent.config import parse_config
from hearth.agent.hub import ToolHub
from hearth.agent.loop import AgentEvent, Decision, StepReply, ToolCall, run_agent
from hearth.agent.specs import ToolResult, ToolSpec, names_clash

from .helpers import stdio_entry

USER = [{"role": "user", "content": "hi"}]


def _one_call(name: str, arguments: dict[str, Any]):
    """A model that calls `name` once, then answers "ok"."""
    turns = iter([[ToolCall("c1", name, arguments)], []])

    def step(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> StepReply:
        calls = next(turns)
        return StepReply(content="" if calls else "ok", tool_calls=calls)

    return step


class Recording:
    """A `ToolCaller` that records the calls that ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def call(self, name: str, arguments: Any = None, cancel: Any = None) -> ToolResult:
        self.ran.append(name)
        return ToolResult(text="ran")


ECHO = ToolSpec("t", "echo", "Say the text back.", {"type": "object"})


class Closed(Exception):
    pass


@pytest.mark.parametrize(
    "answer",
    ["allow_once", "allow_always", "yes", "", None, True, 1, Decision.DENY, Closed("card closed")],
    ids=repr,
)
def test_only_an_explicit_allow_runs_a_call(answer, caplog):
    def approve(call: ToolCall, spec: ToolSpec) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    caller, events = Recording(), []
    with caplog.at_level(logging.ERROR):
        out = run_agent(_one_call("t__echo", {}), caller, USER, [ECHO], approve,
                        on_event=events.append)  # fmt: skip
    assert caller.ran == [] and out.reason == "answered"
    assert out.added[1]["content"] == "the user denied the call to 't__echo'"
    assert [e.decision for e in events if e.kind == "call"] == [Decision.DENY]
    if isinstance(answer, Exception):
        assert "the call is denied" in caplog.text and "card closed" in caplog.text


@pytest.mark.parametrize("answer", [Decision.ALLOW_ONCE, Decision.ALLOW_ALWAYS])
def test_an_explicit_allow_runs_it(answer):
    caller, events = Recording(), []
    run_agent(_one_call("t__echo", {}), caller, USER, [ECHO], lambda c, s: answer,
              on_event=events.append)  # fmt: skip
    assert caller.ran == ["t__echo"]
    assert [e.decision for e in events if e.kind == "call"] == [answer]


def test_which_server_names_can_give_the_same_tool_name():
    assert names_clash("a.b", "a_b") and names_clash("a b", "a/b")  # both `a_b__…`
    assert names_clash("a", "a__b")  # `a__b__c`: "a"'s "b__c" or "a__b"'s "c"
    assert names_clash("a", "a_")  # `a___x`: "a"'s "_x" or "a_"'s "x"
    assert not names_clash("a", "b") and not names_clash("ab", "a_b")
    assert not names_clash("files", "files2") and not names_clash("a-b", "a_b")


def _calls(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_servers_whose_names_differ_only_in_punctuation_are_refused_with_a_sentence(tmp_path):
    logs = {name: tmp_path / f"{name}.calls" for name in ("a.b", "a_b", "other")}
    entries = {n: stdio_entry(env={"HEARTH_TEST_CALLS": str(p)}) for n, p in logs.items()}
    config = parse_config({"mcpServers": entries})
    with ToolHub(config, log_dir=tmp_path / "logs") as hub:
        tools = hub.tools()
        assert {t.server for t in tools} == {"other"}  # neither a.b nor a_b offers a tool
        names = [t.qualified_name for t in tools]
        assert len(names) == len(set(names))
        status = hub.status()
        for name, other in (("a.b", "a_b"), ("a_b", "a.b")):
            assert status[name].state == "failed" and status[name].tools == []
            assert status[name].error == (
                f"the MCP servers '{name}' and '{other}' cannot both be used: the model would "
                "call their tools by the same names ('a_b__…', 'a_b__…'; in these names a "
                "server's name keeps only letters, digits, _ and -), so a call could not say "
                "which server it is for; rename one of them in the MCP config"
            )
        # the model calls the name anyway: the loop refuses it without asking, and the hub,
        # called directly, refuses it with the sentence; neither server is reached
        approved: list[tuple[str, str]] = []

        def approve(call: ToolCall, spec: ToolSpec) -> Decision:
            approved.append((spec.server, spec.name))
            return Decision.ALLOW_ONCE

        events: list[AgentEvent] = []
        out = run_agent(_one_call("a_b__echo", {"text": "x"}), hub, USER, tools, approve,
                        on_event=events.append)  # fmt: skip
        assert approved == [] and out.added[1]["content"].startswith("there is no tool 'a_b__echo'")
        direct = hub.call("a_b__echo", {"text": "x"})
        assert direct.is_error and "cannot both be used" in direct.text
        assert _calls(logs["a.b"]) == [] and _calls(logs["a_b"]) == []
        assert hub.call("other__echo", {"text": "y"}).text == "echo: y"

        # with one of them disabled, the other is used: the approved pair is the one that runs
        hub.set_servers({**config, "a.b": parse_config(
            {"mcpServers": {"a.b": {**entries["a.b"], "disabled": True}}})["a.b"]})  # fmt: skip
        tools = hub.tools()
        assert {t.server for t in tools} == {"a_b", "other"}
        out = run_agent(_one_call("a_b__echo", {"text": "z"}), hub, USER, tools, approve)
        assert approved == [("a_b", "echo")] and out.added[1]["content"] == "echo: z"
        assert _calls(logs["a.b"]) == [] and [c["arguments"] for c in _calls(logs["a_b"])] == [
            {"text": "z"}
        ]
