"""`ToolHub` against real MCP servers written with the mcp SDK (`mcp_server.py`), over stdio
and over streamable HTTP: tools listed and called with arguments; text, structured and image
results; a server that crashes mid-call, one that hangs past the timeout, one that returns a
huge result, one that cannot start: each fails only its own call, with a sentence, and the hub
stays usable. Servers start on demand and stop with the hub."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from hearth.agent.config import ServerConfig, parse_config
from hearth.agent.hub import ToolHub

from .helpers import HttpServer, stdio_entry
from .mcp_server import picture_png

TOOLS = {"echo", "add", "picture", "image_file", "grow", "header", "crash", "hang", "huge"}
TOOLS |= {"pid", "env", "cwd"}


def _hub(entries: dict[str, dict[str, object]], tmp_path: Path, **kw: float) -> ToolHub:
    return ToolHub(parse_config({"mcpServers": entries}), log_dir=tmp_path / "logs", **kw)


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def entry(transport: str, request: pytest.FixtureRequest) -> dict[str, object]:
    if transport == "stdio":
        return stdio_entry()
    live: HttpServer = request.getfixturevalue("live_http")
    return {"url": live.url}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_tools_listed_and_called_with_arguments(entry, tmp_path):
    with _hub({"t": entry}, tmp_path) as hub:
        assert hub.status()["t"].state == "stopped"  # nothing starts before it is needed
        tools = hub.tools()
        assert hub.status()["t"].state == "running"
        assert {t.name for t in tools} == TOOLS and {t.server for t in tools} == {"t"}
        echo = next(t for t in tools if t.name == "echo")
        assert echo.qualified_name == "t__echo" and echo.description == "Say the text back."
        chat_tool = echo.as_chat_tool()
        assert chat_tool["type"] == "function" and chat_tool["function"]["name"] == "t__echo"
        assert chat_tool["function"]["parameters"]["properties"]["text"]["type"] == "string"

        r = hub.call("t__echo", {"text": "héllo"})
        assert (r.text, r.is_error, r.truncated, r.images) == ("echo: héllo", False, False, [])
        total = hub.call("t__add", {"a": 2, "b": 40})
        assert total.structured == {"total": 42} and '"total": 42' in total.text


def test_tools_added_while_running_are_listed_again(entry, tmp_path):
    with _hub({"t": entry}, tmp_path) as hub:
        assert "t__late" not in {t.qualified_name for t in hub.tools()}
        assert hub.call("t__grow", {"name": "late"}).text == "added late"
        time.sleep(0.2)  # the notification comes on its own, after the result
        assert "t__late" in {t.qualified_name for t in hub.tools()}
        assert hub.call("t__late", {}).text == "I am late"


def test_an_image_result_is_the_images_bytes(entry, tmp_path):
    with _hub({"t": entry}, tmp_path) as hub:
        r = hub.call("t__picture", {})
        assert not r.is_error and r.images == [picture_png()]
        assert r.images[0].startswith(b"\x89PNG")


def test_a_huge_result_is_cut_and_the_cut_is_said(entry, tmp_path):
    with _hub({"t": entry}, tmp_path, result_limit=1000) as hub:
        r = hub.call("t__huge", {"size": 50_000})
        assert r.truncated and not r.is_error
        assert r.text.startswith("0123456789" * 100)
        assert "Hearth cut this result: the first 1000 of 50000 characters are shown" in r.text
        assert r.structured is None and "dropped the structured content" in r.text
        assert len(r.text) < 1300
        assert hub.call("t__echo", {"text": "ok"}).text == "echo: ok"


def test_a_call_past_the_timeout_is_an_error_and_the_server_comes_back(entry, tmp_path):
    with _hub({"t": entry}, tmp_path, call_timeout=1.0) as hub:
        before = int(hub.call("t__pid", {}).text)
        start = time.monotonic()
        r = hub.call("t__hang", {"seconds": 3600})
        assert time.monotonic() - start < 10
        assert r.is_error and "did not answer within 1 s" in r.text and "'hang'" in r.text
        assert hub.status()["t"].state == "failed"
        again = hub.call("t__echo", {"text": "back"})
        assert again.text == "echo: back" and hub.status()["t"].state == "running"
        if entry.get("command"):  # a stdio server that hung was restarted: a new process
            assert int(hub.call("t__pid", {}).text) != before


def test_a_stdio_server_that_crashes_mid_call_is_restarted_by_the_next_call(tmp_path):
    with _hub({"t": stdio_entry()}, tmp_path) as hub:
        before = int(hub.call("t__pid", {}).text)
        r = hub.call("t__crash", {})
        assert r.is_error
        assert r.text == (
            "the MCP server 't' stopped during the call to 'crash'; "
            "it will be started again on the next call"
        )
        assert hub.status()["t"].state == "failed"
        after = int(hub.call("t__pid", {}).text)
        assert after != before and not _alive(before)
        assert hub.status()["t"].state == "running"


def test_a_stdio_server_that_died_while_idle_is_seen_and_restarted(tmp_path):
    with _hub({"t": stdio_entry()}, tmp_path) as hub:
        seen: list[tuple[str, str]] = []
        hub.on_status(lambda name, status: seen.append((name, status.state)))
        before = int(hub.call("t__pid", {}).text)
        os.kill(before, 9)
        deadline = time.monotonic() + 10
        while hub.status()["t"].state == "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hub.status()["t"].state == "failed"
        assert "stopped; it will be started again" in hub.status()["t"].error
        assert hub.call("t__echo", {"text": "x"}).text == "echo: x"
        assert ("t", "failed") in seen and seen[-1] == ("t", "running")


def test_an_http_server_that_goes_away_fails_only_its_calls(live_http, tmp_path):
    with _hub({"web": {"url": live_http.url}, "local": stdio_entry()}, tmp_path) as hub:
        assert hub.call("web__echo", {"text": "a"}).text == "echo: a"
        live_http.kill()
        gone = hub.call("web__echo", {"text": "b"})
        assert gone.is_error and "'web'" in gone.text, gone.text
        assert hub.call("local__echo", {"text": "c"}).text == "echo: c"
        live_http.start()  # it comes back: the next call reconnects
        assert hub.call("web__echo", {"text": "d"}).text == "echo: d"


def test_an_http_servers_headers_are_sent(live_http, tmp_path):
    entry = {"url": live_http.url, "headers": {"Authorization": "Bearer s3cret"}}
    with _hub({"web": entry}, tmp_path) as hub:
        assert hub.call("web__header", {"name": "authorization"}).text == "Bearer s3cret"


def test_a_server_that_cannot_start_fails_alone_with_a_sentence(tmp_path):
    entries = {
        "good": stdio_entry(),
        "missing": {"command": "no-such-mcp-server-program"},
        "dies": {
            "command": sys.executable,
            "args": ["-c", "import sys; sys.stderr.write('bad token\\n'); sys.exit(2)"],
        },
        "nowhere": {"url": "http://127.0.0.1:9/mcp"},
    }
    with _hub(entries, tmp_path, start_timeout=20) as hub:
        tools = hub.tools()
        assert {t.server for t in tools} == {"good"}
        status = hub.status()
        assert status["good"].state == "running"
        assert status["missing"].state == "failed"
        assert status["missing"].error == (
            "the MCP server 'missing' could not start: "
            "there is no program 'no-such-mcp-server-program'"
        )
        assert status["dies"].state == "failed" and "'dies'" in status["dies"].error
        assert "bad token" in status["dies"].error  # its last stderr line is quoted
        assert status["nowhere"].state == "failed" and "'nowhere'" in status["nowhere"].error
        r = hub.call("missing__anything", {})
        assert r.is_error and "there is no program" in r.text
        assert hub.call("good__echo", {"text": "fine"}).text == "echo: fine"
        unknown = hub.call("other__echo", {})
        assert unknown.is_error and "there is no tool 'other__echo'" in unknown.text


def test_an_unknown_tool_or_bad_arguments_are_the_servers_sentence(tmp_path):
    with _hub({"t": stdio_entry()}, tmp_path) as hub:
        missing = hub.call("t__nope", {})
        assert missing.is_error and "nope" in missing.text  # the server's own error result
        bad = hub.call("t__add", {"a": "two"})
        assert bad.is_error
        assert hub.call("t__echo", {"text": "still here"}).text == "echo: still here"


def test_cancel_stops_the_running_call_at_once(entry, tmp_path):
    with _hub({"t": entry}, tmp_path) as hub:
        hub.tools()
        cancel = threading.Event()
        threading.Timer(0.3, cancel.set).start()
        start = time.monotonic()
        r = hub.call("t__hang", {"seconds": 3600}, cancel=cancel)
        assert time.monotonic() - start < 3
        assert r.is_error and r.text == "the call to 't__hang' was cancelled"
        assert hub.call("t__echo", {"text": "next"}).text == "echo: next"


def test_env_and_cwd_reach_a_stdio_server(tmp_path):
    entry = stdio_entry(env={"HEARTH_TEST_VALUE": "42"}, cwd=str(tmp_path))
    with _hub({"t": entry}, tmp_path) as hub:
        assert hub.call("t__env", {"name": "HEARTH_TEST_VALUE"}).text == "42"
        assert Path(hub.call("t__cwd", {}).text).resolve() == tmp_path.resolve()


def test_servers_stop_with_the_hub_and_when_reconfigured(tmp_path):
    hub = _hub({"a": stdio_entry(), "b": stdio_entry()}, tmp_path)
    a, b = (int(hub.call(f"{n}__pid", {}).text) for n in "ab")
    hub.set_servers({"a": hub_config("a"), "b": hub_config("b", cwd=str(tmp_path))})
    assert _alive(a) and not _alive(b)  # a unchanged keeps running; b changed was stopped
    assert hub.status()["b"].state == "stopped"
    hub.close()
    assert not _alive(a)
    assert hub.call("a__pid", {}).is_error  # a closed hub says so, it does not raise
    hub.close()  # idempotent


def hub_config(name: str, **extra: object) -> ServerConfig:
    return parse_config({"mcpServers": {name: stdio_entry(**extra)}})[name]
