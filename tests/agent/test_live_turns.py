"""Tool turns that end, with the real default model (Gemma 3 270M) on a live `hearth serve`,
a real MCP server (`mcp_server.py`, the mcp SDK) and `hearth run --tools ... --yes`.

* A turn that would run on, by construction: the output format (`format`, the runner's
  grammar) is an array of at least 1000 calls whose tool and arguments are constants, so
  the model can only write the same call again and again, with `num_predict` unset (the
  service's own cap is 10 x num_ctx tokens, minutes on a CPU). The service ends the turn at
  the first repeat; the agent loop then stops when the next turn makes that call again, and
  says so on the terminal.
* A call written as a fenced JSON block: a template (with Qwen's `<tool_call>` tags, so the
  service reads the hermes format) whose prompt shows five earlier answers that were such a
  block; the greedy model writes one more. A block naming an offered tool is a call and runs
  on the server; one naming no tool stays text.
"""

from __future__ import annotations

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
from server.live_models import MODEL, create_tools_model

from hearth.agent.config import parse_config
from hearth.agent.hub import ToolHub
from hearth.agent.loop import AgentEvent, Decision, run_agent

from .helpers import HttpStep, forced, stdio_entry

pytestmark = pytest.mark.slow

TOOLS_MODEL = "turns-tools"
FENCE_MODEL = "turns-fenced"
FENCE_BAD_MODEL = "turns-fenced-bad"
# Only the same call can be written, at least 1000 times.
RUNAWAY = {"type": "array", "minItems": 1000,
           "items": forced("t__echo", {"text": {"const": "red"}})}  # fmt: skip
ECHO = {"type": "function", "function": {"name": "t__echo", "description": "Say the text back.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                       "required": ["text"]}}}  # fmt: skip
LIMIT = 300  # seconds, the model loaded: below what the runaway turn takes without its end


def fenced_template(tool: str) -> str:
    """Five earlier answers that were a fenced call of `tool`, then the conversation. The
    offered tools are named, not dumped: the greedy text of this base model must not hang on
    the order of the keys of a server's schema (which the MCP SDK's eras list differently)."""
    block = '```json\n{"name": "' + tool + '", "arguments": {"text": "red"}}\n```'
    shots = "".join(
        f"<start_of_turn>user\nEcho red.<end_of_turn>\n<start_of_turn>model\n{block}<end_of_turn>\n"
        for _ in range(5)
    )
    return (
        "{% if tools %}<start_of_turn>user\nCall a function with <tool_call>{...}</tool_call>: "
        "{{ tools | map(attribute='function') | map(attribute='name') | join(', ') }}"
        "<end_of_turn>\n{% endif %}" + shots +
        "{% for m in messages %}<start_of_turn>{{ 'model' if m.role == 'assistant' else 'user' }}"
        "\n{{ m.content }}<end_of_turn>\n{% endfor %}<start_of_turn>model\n"
    )  # fmt: skip


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, gemma3_path: Path) -> Iterator[LiveServer]:
    home = tmp_path_factory.mktemp("turns-home")
    live = start_server(home, gemma3_path, {"HEARTH_CONTEXT_LENGTH": "2048", "HEARTH_OFFLINE": "1"})
    try:
        create_tools_model(live.url, TOOLS_MODEL)
        for name, tool in ((FENCE_MODEL, "t__echo"), (FENCE_BAD_MODEL, "t__nope")):
            body = {"model": name, "from": MODEL, "template": fenced_template(tool),
                    "stream": False}  # fmt: skip
            created = httpx.post(live.url + "/api/create", json=body, timeout=120).json()
            assert created["status"] == "success", created
        warm = {
            "model": TOOLS_MODEL,
            "prompt": "hi",
            "options": {"num_predict": 1},
            "stream": False,
        }
        httpx.post(live.url + "/api/generate", json=warm, timeout=600).raise_for_status()
        yield live
    finally:
        stop_server(live)


def _calls(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_turn_that_repeats_its_call_ends_at_the_repeat(service):
    body = {
        "model": TOOLS_MODEL,
        "messages": [{"role": "user", "content": "Echo red."}],
        "tools": [ECHO],
        "format": RUNAWAY,
        "options": {"temperature": 0},
        "stream": True,
    }
    started = time.monotonic()
    with httpx.stream("POST", service.url + "/api/chat", json=body, timeout=LIMIT) as r:
        lines = [json.loads(x) for x in r.iter_lines() if x]
    final = lines[-1]
    calls = [tc["function"] for x in lines for tc in x["message"].get("tool_calls") or []]
    assert [(c["name"], c["arguments"]) for c in calls] == [("t__echo", {"text": "red"})]
    assert final["done"] and final["done_reason"] == "stop"
    # two calls' tokens (the second is the repeat), not 10 x num_ctx
    assert final["eval_count"] < 100, final
    assert final["prompt_eval_count"] > 0
    assert time.monotonic() - started < LIMIT
    # the runner is free again: the next request is answered at once
    quick = {**body, "format": None, "tools": None, "options": {"num_predict": 2}, "stream": False}
    assert httpx.post(service.url + "/api/chat", json=quick, timeout=30).json()["done"]


def test_hearth_run_tools_yes_ends_a_turn_that_would_run_on(service, tmp_path):
    """`hearth run MODEL --tools mcp.json --yes` with no --num-predict: the first turn's call
    runs once; the next turn calls it again, and the run stops there with a sentence."""
    log = tmp_path / "calls.jsonl"
    (tmp_path / "mcp.json").write_text(json.dumps(
        {"mcpServers": {"t": stdio_entry(env={"HEARTH_TEST_CALLS": str(log)})}}))  # fmt: skip
    (tmp_path / "runaway.json").write_text(json.dumps(RUNAWAY))
    env = dict(os.environ, HEARTH_HOST=service.url, HEARTH_HOME=str(service.home))
    run = subprocess.run(
        [sys.executable, "-m", "hearth", "run", TOOLS_MODEL, "Echo red.", "--tools", "mcp.json",
         "--format", "runaway.json", "--temperature", "0", "--yes"],
        text=True, capture_output=True, env=env, cwd=tmp_path, timeout=3 * LIMIT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert [c["arguments"] for c in _calls(log)] == [{"text": "red"}]  # run once
    assert run.stderr.count("[tool] t__echo -> echo: red") == 1
    assert "[tool] t__echo -> error: the call was not run again" in run.stderr
    assert (
        "(Stopped: the model called t__echo again with the same arguments "
        '({"text": "red"}) after it already had that call\'s result.)' in run.stderr
    )
    assert "step limit" not in run.stderr and "Traceback" not in run.stderr


def test_a_fenced_call_to_an_offered_tool_runs(service, tmp_path):
    log = tmp_path / "calls.jsonl"
    config = parse_config({"mcpServers": {"t": stdio_entry(env={"HEARTH_TEST_CALLS": str(log)})}})
    show = httpx.post(service.url + "/api/show", json={"model": FENCE_MODEL}).json()
    assert "tools" in show["capabilities"]
    options = {"temperature": 0, "num_predict": 80}
    for model, runs in ((FENCE_MODEL, True), (FENCE_BAD_MODEL, False)):
        step = HttpStep(service.url, model, options=options)
        events: list[AgentEvent] = []
        with ToolHub(config, log_dir=tmp_path) as hub:
            tools = [t for t in hub.tools() if t.name == "echo"]
            out = run_agent(step, hub, [{"role": "user", "content": "Echo red."}], tools,
                            lambda c, s: Decision.ALLOW_ONCE, max_steps=1,
                            on_event=events.append)  # fmt: skip
        first = out.added[0]
        # (this base model may write a few words before the block: text before a call is text)
        if runs:  # the block was a call: not in the text, the server ran it
            assert "```" not in first["content"]
            assert [c["function"] for c in first["tool_calls"]] == [
                {"name": "t__echo", "arguments": {"text": "red"}}]  # fmt: skip
            assert [c["arguments"] for c in _calls(log)] == [{"text": "red"}]
            assert out.added[1]["content"] == "echo: red"
        else:  # a block naming a tool not offered: text, as the model wrote it
            assert out.reason == "answered" and "tool_calls" not in first
            assert '```json\n{"name": "t__nope", "arguments": {"text": "red"}}' in first["content"]
            assert len(_calls(log)) == 1
