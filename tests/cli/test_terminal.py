"""`hearth run --tools`'s terminal parts without a model: the approval prompt (once, always,
deny, end of input, a wrong answer asked again), `--yes`, the argument parser, and the
sentences for impossible combinations."""

from __future__ import annotations

import io

import pytest

from hearth.agent.config import ServerConfig
from hearth.agent.hub import ToolSpec
from hearth.agent.loop import Decision, ToolCall
from hearth.cli import build_parser
from hearth.cli.terminal_chat import response_format, run
from hearth.cli.terminal_tools import TerminalApproval

SPEC = ToolSpec("files", "read", "Read a file.", {"type": "object"})
CALL = ToolCall("c1", "files__read", {"path": "/tmp/x"})


def _ask(answers: str, yes: bool = False) -> tuple[list[Decision], str, TerminalApproval]:
    err = io.StringIO()
    servers = {"files": ServerConfig("files", command="files-server")}
    approve = TerminalApproval(io.StringIO(answers), err, yes=yes, servers=servers)
    decisions = [approve(CALL, SPEC) for _ in range(2)]
    return decisions, err.getvalue(), approve


def test_once_asks_again_and_always_is_remembered():
    decisions, said, _ = _ask("o\na\n")
    assert decisions == [Decision.ALLOW_ONCE, Decision.ALLOW_ALWAYS]
    assert said.count("Allow once, always this tool, always this server, or deny? [o/t/s/d]") == 2
    assert 'the model calls read (MCP server \'files\') with {"path": "/tmp/x"}' in said
    decisions, said, approve = _ask("always\n")
    assert decisions == [Decision.ALLOW_ALWAYS, Decision.ALLOW_ALWAYS]
    assert said.count("[o/t/s/d]") == 1 and "(always allowed: files: read)" in said
    assert [g.label() for g in approve.approvals.grants()] == ["files: read"]


def test_deny_a_wrong_answer_and_the_end_of_input():
    decisions, said, _ = _ask("maybe\nd\n")
    assert decisions == [Decision.DENY, Decision.DENY]  # the second: no input left
    assert said.count("[o/t/s/d]") == 3


def test_yes_allows_every_call_without_asking():
    decisions, said, _ = _ask("", yes=True)
    assert decisions == [Decision.ALLOW_ONCE] * 2
    assert "[o/t/s/d]" not in said and said.count("(--yes)") == 2


def test_the_run_flags_and_their_defaults():
    args = build_parser().parse_args(["run", "qwen3", "--tools", "mcp.json", "--yes"])
    assert (args.tools, args.yes, args.max_steps, args.tool_timeout) == ("mcp.json", True, 10, 60.0)
    args = build_parser().parse_args(["run", "m", "--max-steps", "3", "--tool-timeout", "2.5"])
    assert (args.tools, args.yes, args.max_steps, args.tool_timeout) == (None, False, 3, 2.5)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "m", "--max-steps", "0"])


def test_format_is_json_or_a_schema_inline_or_in_a_file(tmp_path):
    assert response_format(None) is None and response_format("json") == "json"
    assert response_format('{"type": "object"}') == {"type": "object"}
    (tmp_path / "s.json").write_text('{"type": "string"}')
    assert response_format(str(tmp_path / "s.json")) == {"type": "string"}
    err = io.StringIO()
    args = build_parser().parse_args(["run", "m", "hi", "--format", str(tmp_path / "none.json")])
    assert run(args, io.StringIO(), err) == 1 and "--format must be" in err.getvalue()


def test_tools_with_raw_is_refused_before_anything_starts():
    err = io.StringIO()
    args = build_parser().parse_args(["run", "m", "hi", "--raw", "--tools", "mcp.json"])
    assert run(args, io.StringIO(), err) == 1
    assert "--tools needs the model's chat template: leave out --raw" in err.getvalue()
