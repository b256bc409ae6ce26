"""MCP beyond tools, against servers written with the official SDK (`mcp_more.py`, scripts the
tests write): prompts listed and used, resources read (text and a picture), a server's
question during a call answered, declined and cancelled, all over both protocol eras (the
2026-07-28 `server/discover` one and the `initialize` handshake of a 2025 server); the
always-allow policy (a whole server allowed, kept in settings.json, asked again once its
command changes); the terminal's answers."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from hearth.agent.approvals import Approvals, Grant, policy_approve, server_identity
from hearth.agent.config import ServerConfig
from hearth.agent.content import parse_prompt_command
from hearth.agent.elicit import ElicitAnswer, Elicitation, check_values, parse_schema
from hearth.agent.hub import HubError, ToolHub, ToolSpec
from hearth.agent.loop import Decision, ToolCall
from hearth.app_settings import load_settings
from hearth.cli.terminal_elicit import TerminalElicit
from hearth.cli.terminal_tools import TerminalApproval, settings_grants

from .mcp_more import red_png, write_server

ERAS = {"2026-07-28": (), "2025-11-25": ("--legacy",)}


def config(script: Path, *extra: str, name: str = "more") -> ServerConfig:
    return ServerConfig(name, command=sys.executable, args=(str(script), *extra))


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_server(tmp_path_factory.mktemp("mcp-more"))


@pytest.fixture(scope="module", params=sorted(ERAS))
def hub(request: pytest.FixtureRequest, script: Path, tmp_path_factory) -> Iterator[ToolHub]:
    era = request.param
    with ToolHub(
        {"more": config(script, *ERAS[era])}, log_dir=tmp_path_factory.mktemp("logs")
    ) as h:
        assert [t.name for t in h.tools()] == ["book", "echo"]
        assert h.status()["more"].protocol == era  # the SDK agreed on that era's version
        yield h


def test_prompts_are_listed_and_give_their_messages(hub: ToolHub):
    (review,) = hub.prompts()
    assert (review.server, review.name, review.description) == (
        "more",
        "review",
        "Ask for a review of some code.",
    )
    assert [(a.name, a.required) for a in review.arguments] == [
        ("code", True),
        ("language", False),
    ]
    messages = hub.get_prompt("more", "review", {"code": "x = 1", "language": "lua"})
    assert messages == [{"role": "user", "content": "Review this lua code:\nx = 1"}]
    with pytest.raises(HubError, match="the MCP server 'more' refused the request"):
        hub.get_prompt("more", "no-such-prompt")


def test_resources_are_listed_and_read(hub: ToolHub):
    found = {r.uri: r for r in hub.resources()}
    assert set(found) == {"notes://today", "pictures://red"}
    assert (found["notes://today"].label, found["notes://today"].mime_type) == (
        "Today's notes",
        "text/markdown",
    )
    (note,) = hub.read_resource("more", "notes://today")
    assert note.text == "# Today\nThe heron is back on the pond." and not note.is_image
    (pic,) = hub.read_resource("more", "pictures://red")
    assert pic.is_image and pic.mime_type == "image/png" and pic.data is not None
    got = Image.open(io.BytesIO(pic.data)).convert("RGB")
    want = Image.open(io.BytesIO(red_png())).convert("RGB")
    assert got.size == want.size and got.tobytes() == want.tobytes()


def test_a_question_during_a_call_is_answered_declined_or_cancelled(hub: ToolHub):
    asked: list[Elicitation] = []

    def answer(action: str, **content: object):
        def handler(q: Elicitation) -> ElicitAnswer:
            asked.append(q)
            return ElicitAnswer(action, dict(content))  # type: ignore[arg-type]

        return handler

    hub.on_elicit(answer("accept", seats=3, window=True, meal="fish"))
    result = hub.call("more__book", {"day": "Friday"})
    assert result.text == "booked 3 seat(s) on Friday, window=True, meal=fish", result.text
    q = asked[-1]
    assert (q.server, q.message) == ("more", "Booking a table on Friday: how many seats?")
    fields = {f.name: f for f in q.fields}
    assert fields["seats"].kind == "integer" and fields["seats"].required
    assert (fields["seats"].minimum, fields["seats"].maximum) == (1, 8)
    assert fields["window"].kind == "boolean" and fields["window"].default is False
    assert [v for v, _ in fields["meal"].options] == ["none", "veg", "fish"]

    hub.on_elicit(answer("decline"))
    assert hub.call("more__book", {"day": "Monday"}).text == "not booked: the user chose decline"
    hub.on_elicit(answer("cancel"))
    assert hub.call("more__book", {"day": "Monday"}).text == "not booked: the user chose cancel"
    hub.on_elicit(None)  # no one to ask: declined
    assert hub.call("more__book", {"day": "Monday"}).text == "not booked: the user chose decline"


def test_the_time_the_user_takes_to_answer_does_not_count(hub: ToolHub):
    import time

    def slow(_q: Elicitation) -> ElicitAnswer:
        time.sleep(1.5)
        return ElicitAnswer("accept", {"seats": 1})

    hub.on_elicit(slow)
    old, hub.call_timeout = hub.call_timeout, 1.0
    try:
        result = hub.call("more__book", {"day": "Sunday"})
    finally:
        hub.call_timeout = old
        hub.on_elicit(None)
    assert result.text == "booked 1 seat(s) on Sunday, window=False, meal=none", result.text


def test_always_allow_this_server_is_kept_and_asked_again_when_its_command_changes(
    script: Path, tmp_path: Path
):
    servers = {"more": config(script)}
    asked: list[str] = []

    def ask(call: ToolCall, spec: ToolSpec) -> Decision:
        asked.append(spec.name)
        return Decision.ALLOW_SERVER

    approve = policy_approve(settings_grants(), lambda: servers, ask)
    book = ToolSpec("more", "book", "", {}), ToolCall("1", "more__book", {})
    echo = ToolSpec("more", "echo", "", {}), ToolCall("2", "more__echo", {})
    assert approve(book[1], book[0]) is Decision.ALLOW_SERVER and asked == ["book"]
    assert approve(echo[1], echo[0]) is Decision.ALLOW_ALWAYS and asked == ["book"]
    stored = load_settings().tool_grants  # in settings.json: a new policy (the CLI) has it
    assert stored == [{"server": "more", "identity": server_identity(servers["more"]), "tool": ""}]
    again = policy_approve(settings_grants(), lambda: servers, ask)
    assert again(echo[1], echo[0]) is Decision.ALLOW_ALWAYS and asked == ["book"]

    # The same name, another command: the grant does not hold, and pruning drops it.
    moved = write_server(tmp_path, "moved.py")
    servers = {"more": config(moved)}
    store = settings_grants()
    assert not store.allows(servers["more"], "echo")
    approve = policy_approve(store, lambda: servers, lambda c, s: Decision.DENY)
    assert approve(echo[1], echo[0]) is Decision.DENY
    assert store.prune(servers) == [Grant("more", server_identity(config(script)), "")]
    assert load_settings().tool_grants == []


def test_a_tool_grant_holds_for_that_tool_only_and_revoking_asks_again(script: Path):
    saved: list[list[Grant]] = []
    store = Approvals(save=saved.append)
    cfg = config(script)
    grant = store.grant(cfg, "echo")
    assert store.allows(cfg, "echo") and not store.allows(cfg, "book")
    assert grant.label() == "more: echo" and saved[-1] == [grant]
    assert store.allows(config(script, name="renamed"), "echo")  # tied to the command
    http = ServerConfig("web", url="http://127.0.0.1:9/mcp")
    assert server_identity(http) == "http http://127.0.0.1:9/mcp"
    store.revoke(grant)
    assert not store.allows(cfg, "echo") and saved[-1] == []
    assert Approvals.from_json([{"server": 1}, "x", grant.to_json()]).grants() == [grant]


def test_the_terminal_asks_four_ways_and_keeps_grants_in_the_policy(script: Path):
    cfg = config(script)
    store = Approvals()
    err = io.StringIO()
    approve = TerminalApproval(io.StringIO("s\n"), err, approvals=store, servers={"more": cfg})
    spec, call = ToolSpec("more", "echo", "", {}), ToolCall("1", "more__echo", {"text": "hi"})
    assert approve(call, spec) is Decision.ALLOW_SERVER
    assert approve(call, spec) is Decision.ALLOW_ALWAYS
    said = err.getvalue()
    assert said.count("[o/t/s/d]") == 1 and "(always allowed: more: every tool)" in said
    assert store.grants() == [Grant("more", server_identity(cfg), "")]


def test_the_terminal_answers_a_question_field_by_field():
    fields = parse_schema(
        {
            "type": "object",
            "properties": {
                "seats": {"type": "integer", "minimum": 1, "maximum": 8},
                "window": {"type": "boolean", "default": False},
                "meal": {"type": "string", "enum": ["none", "veg"]},
                "note": {"type": "string"},
            },
            "required": ["seats"],
        }
    )
    q = Elicitation("more", "How many?", fields)
    err = io.StringIO()
    answers = "maybe\na\n0\n2\n\nveg\n\n"
    got = TerminalElicit(io.StringIO(answers), err)(q)
    assert got == ElicitAnswer("accept", {"seats": 2, "window": False, "meal": "veg"})
    assert "'seats' must be at least 1" in err.getvalue()
    assert TerminalElicit(io.StringIO("d\n"), err)(q) == ElicitAnswer("decline")
    assert TerminalElicit(io.StringIO(""), err)(q) == ElicitAnswer("cancel")
    err = io.StringIO()
    assert TerminalElicit(io.StringIO(""), err, decline_all=True)(q) == ElicitAnswer("decline")
    assert "declined: --yes answers no questions for you" in err.getvalue()


def test_form_values_and_prompt_commands_are_checked_with_sentences():
    fields = parse_schema(
        {
            "properties": {
                "n": {"type": "number", "maximum": 2},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
                "kind": {"oneOf": [{"const": "x", "title": "Ex"}]},
            },
            "required": ["n"],
        }
    )
    assert fields[2].options == (("x", "Ex"),)
    assert check_values(fields, {"n": "1.5", "tags": "a, b", "kind": "x"}) == {
        "n": 1.5,
        "tags": ["a", "b"],
        "kind": "x",
    }
    for raw, why in [({}, "'n' is required"), ({"n": "3"}, "at most 2"), ({"n": "z"}, "number")]:
        with pytest.raises(ValueError, match=why):
            check_values(fields, raw)
    with pytest.raises(ValueError, match="cannot show"):
        parse_schema({"properties": {"deep": {"type": "object"}}})
    cmd = parse_prompt_command('/review code="x = 1" language=lua')
    assert cmd is not None and (cmd.name, cmd.arguments) == (
        "review",
        {"code": "x = 1", "language": "lua"},
    )
    assert parse_prompt_command("hello /review") is None
    with pytest.raises(ValueError, match="name=value"):
        parse_prompt_command("/review oops")


def test_grants_made_by_the_app_and_the_cli_at_once_are_all_kept(script: Path):
    """Two programs hold grants over one settings.json (the desktop app and `hearth run`):
    each reads the file again before using or changing them, so neither loses the other's,
    and a revoke in one is seen by the other at its next call."""
    from hearth.app_settings import load_settings, save_settings

    servers = {"more": config(script)}
    app, cli = settings_grants(), settings_grants()
    book = app.grant(servers["more"], "book")
    echo = cli.grant(servers["more"], "echo")
    assert cli.allows(servers["more"], "book") and app.allows(servers["more"], "echo")
    assert set(map(Grant.from_json, load_settings().tool_grants)) == {book, echo}
    settings = load_settings()  # another key changed meanwhile survives a grant's write
    settings.tool_max_steps = 7
    save_settings(settings)
    app.revoke(echo)
    assert not cli.allows(servers["more"], "echo") and cli.allows(servers["more"], "book")
    after = load_settings()
    assert after.tool_max_steps == 7 and after.tool_grants == [book.to_json()]
    for grant in app.grants():
        app.revoke(grant)
