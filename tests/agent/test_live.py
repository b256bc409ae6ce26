"""The agent loop and `hearth run --tools` on a live `hearth serve` with real models and a
real MCP server (`mcp_server.py`, the mcp SDK):

* the default model (Gemma 3 270M) given a template that offers tools (`TOOLS_TEMPLATE`, the
  live API tests' own) and held to a tool call by a JSON schema (`format`, the runner's
  grammar): the call it writes is parsed by the service (toolformats' generic JSON format),
  reaches the server with the model's arguments, its result is in the next pass's prompt,
  and the loop stops at the step limit;
* a tiny random Gemma 3 with a vision projector (`build_tiny_gemma3_vision`) given a tool's
  picture: the image reaches the model as an image (its prompt grows by the image's tokens
  and the reply depends on the picture);
* `hearth run MODEL --tools CONFIG.json` as a new user runs it: approval on the terminal,
  `--yes`, a model that cannot use tools, and the servers stopped when the chat ends.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server.fakes import LiveServer, start_server, stop_server
from server.live_models import MODEL, TOOLS_TEMPLATE, create_tools_model

from hearth.agent.config import parse_config
from hearth.agent.hub import ToolHub
from hearth.agent.loop import AgentEvent, Decision, run_agent
from hearth.plugins.testing import ConverterUnavailableError, sample_images

from .helpers import HttpStep, forced, stdio_entry

pytestmark = pytest.mark.slow

TOOLS_MODEL = "agent-tools"
VISION_MODEL = "agent-vision"
COLORS = ["red", "green", "blue"]
GREEDY = {"temperature": 0, "num_predict": 48}


ECHO_A_COLOR = forced("t__echo", {"text": {"enum": COLORS}})


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, gemma3_path: Path) -> Iterator[LiveServer]:
    home = tmp_path_factory.mktemp("agent-home")
    live = start_server(home, gemma3_path, {"HEARTH_CONTEXT_LENGTH": "2048", "HEARTH_OFFLINE": "1"})
    try:
        create_tools_model(live.url, TOOLS_MODEL)
        yield live
    finally:
        stop_server(live)


def _calls(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_model_calls_a_tool_and_the_loop_stops_at_the_step_limit(service, tmp_path):
    log = tmp_path / "calls.jsonl"
    config = parse_config({"mcpServers": {"t": stdio_entry(env={"HEARTH_TEST_CALLS": str(log)})}})
    step = HttpStep(service.url, TOOLS_MODEL, format=ECHO_A_COLOR, options=GREEDY)
    events: list[AgentEvent] = []
    with ToolHub(config, log_dir=tmp_path) as hub:
        tools = [t for t in hub.tools() if t.name in ("echo", "pid")]  # a short prompt
        ask = [{"role": "user", "content": "Echo a color, please."}]
        out = run_agent(step, hub, ask, tools, lambda c, s: Decision.ALLOW_ONCE, max_steps=2,
                        on_event=events.append)  # fmt: skip
    made = [e.call for e in events if e.kind == "call"]
    assert len(made) == 2 and all(c is not None and c.name == "t__echo" for c in made)
    # the same color twice is the same call again: not run, the loop stops there
    same = made[0].arguments == made[1].arguments  # type: ignore[union-attr]
    assert (out.reason, out.steps) == ("repeated" if same else "step_limit", 2)
    # what reached the server is what the model wrote
    assert [c["arguments"] for c in _calls(log)] == [c.arguments for c in made[: 2 - same] if c]
    assert all(c.arguments["text"] in COLORS for c in made if c)
    # each result went back: the second request carries it, the second prompt is longer
    result = out.added[1]
    assert result["role"] == "tool" and result["content"] == f"echo: {made[0].arguments['text']}"
    assert step.requests[1][-1] == result
    first, second = step.prompt_tokens()
    assert second > first


def test_the_result_is_in_the_next_prompt_cut_to_the_limit(service, tmp_path):
    """The same forced call with results of different sizes (the hub's cap): the first
    prompts are the same, the second differ by the result's tokens."""
    config = parse_config({"mcpServers": {"t": stdio_entry()}})
    seconds = []
    for limit in (40, 1000):
        step = HttpStep(service.url, TOOLS_MODEL, options=GREEDY,
                        format=forced("t__huge", {"size": {"const": 3000}}))  # fmt: skip
        with ToolHub(config, log_dir=tmp_path, result_limit=limit) as hub:
            tools = [t for t in hub.tools() if t.name == "huge"]
            out = run_agent(step, hub, [{"role": "user", "content": "Count."}], tools,
                            lambda c, s: Decision.ALLOW_ONCE, max_steps=2)  # fmt: skip
        text = str(out.added[1]["content"])
        assert text.startswith("0123456789"[: min(limit, 10)])
        assert f"the first {limit} of 3000 characters are shown" in text
        seconds.append(step.prompt_tokens())
    (short_first, short_second), (long_first, long_second) = seconds
    assert short_first == long_first
    assert long_second - short_second > 100  # 960 more digits: far more tokens


def test_hearth_run_tools_as_a_new_user(service, tmp_path):
    """`hearth run MODEL --tools mcp.json`: the README's steps, stdin scripted."""
    log = tmp_path / "calls.jsonl"
    (tmp_path / "mcp.json").write_text(json.dumps(
        {"mcpServers": {"t": stdio_entry(env={"HEARTH_TEST_CALLS": str(log)})}}))  # fmt: skip
    (tmp_path / "call.json").write_text(json.dumps(ECHO_A_COLOR))
    env = dict(os.environ, HEARTH_HOST=service.url, HEARTH_HOME=str(service.home))
    common = ["--tools", "mcp.json", "--format", "call.json", "--temperature", "0",
              "--num-predict", "48", "--max-steps", "1"]  # fmt: skip

    def hearth(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hearth", *args], input=stdin, text=True,
                              capture_output=True, env=env, cwd=tmp_path, timeout=600)  # fmt: skip

    # asked on the terminal: "o" allows once; the server sees the model's arguments
    run = hearth("run", TOOLS_MODEL, *common, stdin="Echo a color.\no\n/bye\n")
    assert run.returncode == 0, run.stderr
    assert "Tools: t__echo" in run.stderr
    assert "the model calls echo (MCP server 't') with {\"text\": " in run.stderr
    assert "Allow once, always this tool, always this server, or deny? [o/t/s/d]" in run.stderr
    [call] = _calls(log)
    assert f"[tool] t__echo -> echo: {call['arguments']['text']}" in run.stderr
    assert "stopped after 1 steps with tool calls: the step limit" in run.stderr
    assert "Traceback" not in run.stderr
    assert not _alive(int(call["pid"]))  # the MCP server stopped with the chat

    # denied: the server is not called
    run = hearth("run", TOOLS_MODEL, *common, stdin="Echo a color.\nd\n/bye\n")
    assert run.returncode == 0 and len(_calls(log)) == 1
    assert "[tool] t__echo -> error: the user denied the call to 't__echo'" in run.stderr

    # --yes, one prompt on the command line
    run = hearth("run", TOOLS_MODEL, "Echo a color.", *common, "--yes")
    assert run.returncode == 0, run.stderr
    assert "(--yes)" in run.stderr and len(_calls(log)) == 2

    # a model whose template has no tools is refused with the sentence
    run = hearth("run", MODEL, "hi", "--tools", "mcp.json")
    assert run.returncode == 1
    assert (
        f"hearth: {MODEL} cannot use tools: its chat template has no place for them" in run.stderr
    )
    # a config with a mistake: the sentence, no traceback
    (tmp_path / "bad.json").write_text('{"mcpServers": {"t": {"args": []}}}')
    run = hearth("run", TOOLS_MODEL, "hi", "--tools", "bad.json")
    assert run.returncode == 1 and "server 't' needs \"command\"" in run.stderr
    assert "Traceback" not in run.stderr


def _alive(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.1)
    return True


# -- images ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vision_model(service: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> str:
    from hearth_gemma3.testing import build_tiny_gemma3_vision

    try:
        files = build_tiny_gemma3_vision(tmp_path_factory.mktemp("gemma3-vision"))
    except ConverterUnavailableError as e:
        pytest.skip(str(e))
    body = {"model": VISION_MODEL, "from": str(files.text), "projector": str(files.mmproj),
            "template": TOOLS_TEMPLATE, "stream": False}  # fmt: skip
    assert (
        httpx.post(service.url + "/api/create", json=body, timeout=300).json()["status"]
        == "success"
    )
    return VISION_MODEL


class OneCall:
    """The first turn calls `image_file(path)` (scripted); later turns are the real model's."""

    def __init__(self, path: Path, model: HttpStep) -> None:
        self.path, self.model, self.turns = path, model, 0

    def __call__(self, messages, tools):
        from hearth.agent.loop import StepReply, ToolCall

        self.turns += 1
        if self.turns == 1:
            return StepReply(tool_calls=[ToolCall("c1", "t__image_file", {"path": str(self.path)})])
        return self.model(messages, tools)


def test_a_tools_picture_reaches_a_vision_model_as_an_image(service, vision_model, tmp_path):
    show = httpx.post(service.url + "/api/show", json={"model": vision_model}).json()
    assert {"vision", "tools"} <= set(show["capabilities"])
    config = parse_config({"mcpServers": {"t": stdio_entry()}})
    pictures = sample_images()
    options = {"temperature": 0, "num_predict": 8}
    seen: dict[str, tuple[int, int, str]] = {}
    with ToolHub(config, log_dir=tmp_path) as hub:
        # only the one tool: this model's context is 512 tokens
        tools = [t for t in hub.tools() if t.name == "image_file"]
        for name in ("normal", "tiny"):
            path = tmp_path / f"{name}.png"
            path.write_bytes(pictures[name])
            model = HttpStep(service.url, vision_model, options=options)
            out = run_agent(OneCall(path, model), hub, [{"role": "user", "content": "Look."}],
                            tools, lambda c, s: Decision.ALLOW_ONCE)  # fmt: skip
            sent = model.requests[0]
            # the picture's bytes, as Ollama's `images`, on the tool message
            assert sent[-1]["role"] == "tool" and sent[-1]["tool_name"] == "t__image_file"
            assert sent[-1]["images"] == [base64.b64encode(pictures[name]).decode()]
            # the same conversation without the image, for its prompt's size
            bare = [{k: v for k, v in m.items() if k != "images"} for m in sent]
            without = httpx.post(service.url + "/api/chat", timeout=300, json={
                "model": vision_model, "messages": bare, "options": options, "stream": False,
                "tools": [t.as_chat_tool() for t in tools]}).json()  # fmt: skip
            assert not model.finals[0]["hearth"]["truncated"]  # type: ignore[index]
            seen[name] = (model.prompt_tokens()[0], without["hearth"]["prompt_tokens"], out.content)
    # as an image: the prompt has the image's tokens (16 per image for this model, and its
    # markers), and the greedy reply depends on the picture
    (normal, normal_bare, normal_reply), (tiny, tiny_bare, tiny_reply) = (
        seen["normal"],
        seen["tiny"],
    )
    assert normal - normal_bare >= 16 and tiny - tiny_bare == normal - normal_bare
    assert normal_reply != tiny_reply, seen
