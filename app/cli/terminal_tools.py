"""`hearth run MODEL --tools CONFIG.json [--yes]`: the terminal chat with MCP tools.

The servers in CONFIG.json (Claude Desktop's `{"mcpServers": ...}` shape, `hearth.agent.
config`) are started when the chat starts and stopped when it ends. Each turn runs
`hearth.agent.loop.run_agent`: before every call the terminal asks "Allow once / always this
tool / always this server / deny" (a line on stdin: o, t, s or d; end of input denies), or
`--yes` allows all. The "always" answers are the desktop app's grants too (the app's settings,
`hearth.agent.approvals`): a tool allowed always in either runs without asking in both, while
the server's command or URL stays the same. A server's question during a call (elicitation)
is asked on the terminal too (`terminal_elicit`). Calls and
results are reported on stderr, so stdout is the conversation only; so is why a run stopped
early (the step limit, a call the model repeated, a turn cut at its token cap).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any, TextIO

from ..agent.approvals import Approvals, Grant, policy_approve
from ..agent.config import ConfigError, ServerConfig, load_config_file
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
from ..app_settings import load_tool_grants, save_tool_grants
from ..client import HearthClient, ServiceError
from .terminal_elicit import TerminalElicit

__all__ = ["TerminalApproval", "ToolSession", "ToolsUnavailable", "open_tools", "settings_grants"]

_ANSWERS = {
    "o": Decision.ALLOW_ONCE,
    "once": Decision.ALLOW_ONCE,
    "y": Decision.ALLOW_ONCE,
    "yes": Decision.ALLOW_ONCE,
    "t": Decision.ALLOW_ALWAYS,
    "tool": Decision.ALLOW_ALWAYS,
    "a": Decision.ALLOW_ALWAYS,
    "always": Decision.ALLOW_ALWAYS,
    "s": Decision.ALLOW_SERVER,
    "server": Decision.ALLOW_SERVER,
    "d": Decision.DENY,
    "deny": Decision.DENY,
    "n": Decision.DENY,
    "no": Decision.DENY,
}
_QUESTION = "Allow once, always this tool, always this server, or deny? [o/t/s/d] "
_SHOWN = 300  # characters of a result shown on the terminal


class ToolsUnavailable(ServiceError):
    """The chat cannot have tools; the message is the sentence to print."""


def _arguments(call: ToolCall) -> str:
    return json.dumps(call.arguments, ensure_ascii=False)


class TerminalApproval:
    """`Approve` on a terminal: asks on `err`, reads the answer from `inp` (o, t, s or d; end
    of input denies); `yes` allows every call. The "always" answers are grants in `approvals`
    (`hearth.agent.approvals`, the policy the desktop app uses too: tied to the server's
    command or URL in `servers`, kept in the app's settings when `approvals` is
    `settings_grants()`)."""

    def __init__(
        self,
        inp: TextIO,
        err: TextIO,
        yes: bool = False,
        approvals: Approvals | None = None,
        servers: Mapping[str, ServerConfig] | None = None,
    ) -> None:
        self.inp, self.err, self.yes = inp, err, yes
        self.approvals = approvals if approvals is not None else Approvals()
        self.servers = dict(servers or {})
        self._approve = policy_approve(self.approvals, lambda: self.servers, self._ask, self._said)

    def __call__(self, call: ToolCall, spec: ToolSpec) -> Decision:
        if self.yes:
            self.err.write(f"\n[tool] {call.name} {_arguments(call)} (--yes)\n")
            return Decision.ALLOW_ONCE
        return self._approve(call, spec)

    def _said(self, call: ToolCall, _spec: ToolSpec, grant: Grant) -> None:
        self.err.write(
            f"\n[tool] {call.name} {_arguments(call)} (always allowed: {grant.label()})\n"
        )

    def _ask(self, call: ToolCall, spec: ToolSpec) -> Decision:
        self.err.write(
            f"\n[tool] the model calls {spec.name} (MCP server '{spec.server}') with "
            f"{_arguments(call)}\n"
        )
        while True:
            self.err.write(_QUESTION)
            self.err.flush()
            line = self.inp.readline()
            if not line:
                self.err.write("\n")
                return Decision.DENY
            decision = _ANSWERS.get(line.strip().lower())
            if decision is not None:
                return decision


def settings_grants() -> Approvals:
    """The "always allow" grants in the app's settings.json (the desktop app's too), read
    again before each use and written back with only `tool_grants` changed."""

    def save(grants: list[Grant]) -> None:
        save_tool_grants([g.to_json() for g in grants])

    return Approvals.from_json(load_tool_grants(), save, reload=load_tool_grants)


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
    hub.on_elicit(TerminalElicit(inp, err, decline_all=args.yes))
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
    approve = TerminalApproval(inp, err, args.yes, settings_grants(), enabled)
    return ToolSession(hub, tools, approve, err, args.max_steps, vision)
