"""`hearth run MODEL --tools CONFIG.json [--yes]`: the terminal chat with MCP tools.

The servers in CONFIG.json (Claude Desktop's `{"mcpServers": ...}` shape, `hearth.agent.
config`) are started when the chat starts and stopped when it ends. Each turn runs
`hearth.agent.loop.run_agent`: before every call the terminal asks "Allow once / always /
deny" (a line on stdin: o, a or d; end of input denies), or `--yes` allows all. Calls and
results are reported on stderr, so stdout is the conversation only; so is why a run stopped
early (the step limit, a call the model repeated, a turn cut at its token cap).
"""

from __future__ import annotations

import json
import threading
from typing import Any, TextIO

from ..agent.config import ConfigError, load_config_file
from ..agent.hub import ToolHub, ToolSpec
from ..agent.loop import (
    AgentEvent,
    AgentOutcome,
    ChatStep,
    Decision,
    ToolCall,
    no_tools_sentence,
    offers_tools,
    repeated_sentence,
    run_agent,
)
from ..client import HearthClient, ServiceError

__all__ = ["TerminalApproval", "ToolSession", "ToolsUnavailable", "open_tools"]

_ANSWERS = {
    "o": Decision.ALLOW_ONCE,
    "once": Decision.ALLOW_ONCE,
    "y": Decision.ALLOW_ONCE,
    "yes": Decision.ALLOW_ONCE,
    "a": Decision.ALLOW_ALWAYS,
    "always": Decision.ALLOW_ALWAYS,
    "d": Decision.DENY,
    "deny": Decision.DENY,
    "n": Decision.DENY,
    "no": Decision.DENY,
}
_SHOWN = 300  # characters of a result shown on the terminal


class ToolsUnavailable(ServiceError):
    """The chat cannot have tools; the message is the sentence to print."""


def _arguments(call: ToolCall) -> str:
    return json.dumps(call.arguments, ensure_ascii=False)


class TerminalApproval:
    """`Approve` on a terminal: asks on `err`, reads the answer from `inp`; "always" is
    remembered for that tool for the rest of the chat; `yes` allows every call."""

    def __init__(self, inp: TextIO, err: TextIO, yes: bool = False) -> None:
        self.inp, self.err, self.yes = inp, err, yes
        self.always: set[str] = set()

    def __call__(self, call: ToolCall, spec: ToolSpec) -> Decision:
        if self.yes or spec.qualified_name in self.always:
            why = "--yes" if self.yes else "always allowed"
            self.err.write(f"\n[tool] {call.name} {_arguments(call)} ({why})\n")
            return Decision.ALLOW_ONCE if self.yes else Decision.ALLOW_ALWAYS
        self.err.write(
            f"\n[tool] the model calls {spec.name} (MCP server '{spec.server}') with "
            f"{_arguments(call)}\n"
        )
        while True:
            self.err.write("Allow once, always, or deny? [o/a/d] ")
            self.err.flush()
            line = self.inp.readline()
            if not line:
                self.err.write("\n")
                return Decision.DENY
            decision = _ANSWERS.get(line.strip().lower())
            if decision is Decision.ALLOW_ALWAYS:
                self.always.add(spec.qualified_name)
            if decision is not None:
                return decision


class ToolSession:
    """The tools of one terminal chat: the hub (its servers), the tools offered, the
    approval and the loop's settings."""

    def __init__(
        self,
        hub: ToolHub,
        tools: list[ToolSpec],
        approve: TerminalApproval,
        err: TextIO,
        max_steps: int,
        images: bool,
    ) -> None:
        self.hub, self.tools, self.approve, self.err = hub, tools, approve, err
        self.max_steps, self.images = max_steps, images

    def _event(self, event: AgentEvent) -> None:
        if event.kind != "result" or event.result is None or event.call is None:
            return
        r = event.result
        text = r.text if len(r.text) <= _SHOWN else r.text[:_SHOWN] + " ..."
        extra = f" (+{len(r.images)} image(s))" if r.images else ""
        mark = "error: " if r.is_error else ""
        self.err.write(f"[tool] {event.call.name} -> {mark}{text}{extra}\n")
        self.err.flush()

    def run(self, messages: list[dict[str, Any]], step: ChatStep) -> AgentOutcome:
        cancel = threading.Event()
        outcome = run_agent(
            step,
            self.hub,
            messages,
            self.tools,
            self.approve,
            max_steps=self.max_steps,
            cancel=cancel,
            on_event=self._event,
            images=self.images,
        )
        if outcome.reason == "step_limit":
            self.err.write(
                f"\n(stopped after {outcome.steps} steps with tool calls: the step limit; "
                "--max-steps changes it)\n"
            )
        elif outcome.reason == "repeated" and outcome.repeated is not None:
            self.err.write(f"\n({repeated_sentence(outcome.repeated)})\n")
        return outcome

    def close(self) -> None:
        self.hub.close()


def open_tools(
    args: Any, client: HearthClient, model: str, inp: TextIO, err: TextIO
) -> ToolSession:
    """Read the config, check the model can use tools, start the servers and list their
    tools. Raises `ToolsUnavailable` with the sentence when the chat cannot have tools."""
    try:
        servers = load_config_file(args.tools)
    except ConfigError as e:
        raise ToolsUnavailable(str(e)) from None
    enabled = {name: s for name, s in servers.items() if s.enabled}
    if not enabled:
        raise ToolsUnavailable(f"{args.tools} has no enabled MCP servers")
    show = client.show(model)
    if not offers_tools(show):
        raise ToolsUnavailable(no_tools_sentence(model))
    hub = ToolHub(enabled, call_timeout=args.tool_timeout)
    try:
        tools = hub.tools()
        for status in hub.status().values():
            if status.state == "failed":
                err.write(f"hearth: {status.error}\n")
        if not tools:
            raise ToolsUnavailable("no MCP server offered any tool")
    except BaseException:
        hub.close()
        raise
    names = ", ".join(t.qualified_name for t in tools)
    err.write(f"Tools: {names}\n")
    vision = "vision" in (show.get("capabilities") or [])
    approve = TerminalApproval(inp, err, yes=args.yes)
    return ToolSession(hub, tools, approve, err, args.max_steps, vision)
