"""Tool turns that end, and calls written as fenced JSON blocks.

The parser is fed the text models emit (each family's call as llama.cpp's test-chat.cpp has
it, tests/server/test_tool_formats.py); the routes run it on the fake runner (which streams a
script word by word, tests/server/fakes.py), so what each API answers is known by
construction:

* a reply that goes on writing the same call (a greedy model after the tool's result) ends
  at the repeat: one call, done_reason "stop", the rest never generated; with parallel calls
  off (OpenAI's `parallel_tool_calls: false`, Anthropic's `disable_parallel_tool_use`) the
  turn ends at its first call;
* a fenced ```json block whose object names an offered tool and whose arguments validate
  against its schema is a call in every format and every API, streamed or not; a fenced
  object naming no tool, with arguments the schema refuses, or code in another language stays
  text (and a block that cannot be a call streams on without waiting for the end).
"""

from __future__ import annotations

import json

import pytest

from hearth.plugins.testing import write_tiny_model
from hearth.server.prompting.fenced import tool_schemas
from hearth.server.prompting.outputs import OutputParser
from hearth.server.prompting.toolformats import detect_tool_format

from .fakes import add_model
from .tool_outputs import (
    CALL,
    EMITTED,
    LLAMA31,
    NEMO,
    QWEN3_CODER,
    QWEN25,
    TOOLS,
    run,
    template,
)
from tiny_models import tiny_llama

SCHEMAS = tool_schemas(TOOLS)
HERMES_CALL = EMITTED[QWEN25]
FENCED = '```json\n{"name": "special_function", "arguments": {"arg1": 1}}\n```'


def parser(name: str = QWEN25, **kw) -> OutputParser:
    return OutputParser(tools=SCHEMAS, format=detect_tool_format(template(name)), **kw)


def feed_until_over(p: OutputParser, text: str, step: int = 3) -> int:
    """Feed `text` `step` characters at a time until the turn is over; the characters fed."""
    for i in range(0, len(text), step):
        p.feed(text[i : i + step])
        if p.turn_over:
            return i + step
    return len(text)


# -- turns that end -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", [QWEN25, LLAMA31, NEMO, QWEN3_CODER])
def test_a_repeated_call_ends_the_turn(name):
    call = EMITTED[name]
    sep = "; " if name == LLAMA31 else "\n"
    runaway = sep.join([call] * 50)
    p = parser(name)
    fed = feed_until_over(p, runaway)
    assert p.turn_over
    # over as the second call is whole: never more than a few characters after it
    assert fed <= 2 * len(call) + len(sep) + 3
    _, content, calls = p.finish()
    assert [(c.name, c.arguments) for c in calls] == [CALL]
    assert content == ""


def test_different_calls_go_on_until_one_repeats():
    other = HERMES_CALL.replace('"arg1": 1', '"arg1": 2')
    p = parser()
    text = "\n".join([HERMES_CALL, other, HERMES_CALL, other])
    fed = feed_until_over(p, text, step=1)
    # over as the third call's JSON is whole (its closing tag is not needed)
    assert p.turn_over and fed == text.index("}}", len(HERMES_CALL) + len(other) + 2) + 2
    assert [c.arguments for c in p.finish()[2]] == [{"arg1": 1}, {"arg1": 2}]


def test_one_call_ends_the_turn_at_its_first_call():
    p = parser(one_call=True)
    fed = feed_until_over(p, HERMES_CALL + "\n" + HERMES_CALL.replace("1}", "2}"), step=1)
    assert p.turn_over and fed < len(HERMES_CALL)  # its JSON is whole: the closing tag not needed
    assert [(c.name, c.arguments) for c in p.finish()[2]] == [CALL]


def test_a_call_inside_an_unfinished_object_does_not_end_the_turn():
    """Generic JSON: a call-shaped value inside an object still being written is no call."""
    text = '{"name": "python", "arguments": {"code": {"name": "special_function", "arguments": '
    text += '{"arg1": 1}}'
    p = OutputParser(tools=SCHEMAS, one_call=True)  # the generic format
    feed_until_over(p, text, step=1)
    assert not p.turn_over
    p.feed("}}")
    assert p.turn_over
    assert [c.name for c in p.finish()[2]] == ["python"]


# -- fenced calls -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [QWEN25, LLAMA31, NEMO, QWEN3_CODER, None])
@pytest.mark.parametrize("step", [1, 4, 1000])
def test_a_fenced_call_to_an_offered_tool_is_a_call(name, step):
    p = parser(name) if name else OutputParser(tools=SCHEMAS)
    before = "Let me check.\n"
    _, content, calls, _ = run(p, before + FENCED + "\n", step)
    assert calls == [CALL]
    assert content.strip() == before.strip()


@pytest.mark.parametrize(
    "block",
    [
        '```json\n{"name": "unknown_tool", "arguments": {"arg1": 1}}\n```',  # no such tool
        '```json\n{"name": "special_function", "arguments": {"arg1": "one"}}\n```',  # schema
        '```json\n{"name": "special_function", "arguments": {}}\n```',  # required arg missing
        '```json\n{"name": "special_function", "arguments": {"arg1": 1}} and more\n```',
        '```python\nprint({"name": "special_function", "arguments": {"arg1": 1}})\n```',
        '```json\n{"answer": 42}\n```',
    ],
)
@pytest.mark.parametrize("step", [1, 1000])
def test_a_fenced_block_that_is_no_call_stays_text(block, step):
    text = "Here:\n" + block + "\nDone."
    _, content, calls, _ = run(parser(), text, step)
    assert (calls, content) == ([], text)


def test_a_code_block_streams_before_the_reply_ends():
    """A block that cannot be a call is let go as soon as that is certain."""
    p = parser()
    out = p.feed("Try:\n```py")
    out = p.feed("thon\nprint(1)\n")
    assert out == ("", "```python\nprint(1)\n")


def test_a_fenced_call_with_one_call_ends_the_turn_before_its_closing_fence():
    p = parser(one_call=True)
    fed = feed_until_over(p, FENCED + "\nMore text that is never generated.", step=1)
    assert p.turn_over and fed <= FENCED.index("}}") + 2
    assert [(c.name, c.arguments) for c in p.finish()[2]] == [CALL]


# -- every API, streamed and not (the fake runner streams the script) --------------------------


@pytest.fixture
def hermes_model(fake_service, tmp_path):
    path = write_tiny_model(
        tmp_path / "hermes.gguf",
        tiny_llama(layers=1, embd=32, ff=64, chat_template=template(QWEN25)),
    )
    add_model(fake_service.store, "hermes", path)
    return fake_service


ANTHROPIC_TOOLS = [
    {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS
]
RESPONSES_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]


def _ask(client, api: str, stream: bool, **extra) -> tuple[list[tuple], str, dict]:
    """(calls, content, final record) of one request to `api`."""
    messages = [{"role": "user", "content": "Hey"}]
    if api == "ollama":
        body = {"model": "hermes", "messages": messages, "tools": TOOLS, "stream": stream}
        r = client.post("/api/chat", json={**body, **extra})
        assert r.status_code == 200, r.text
        lines = [json.loads(x) for x in r.text.splitlines() if x] if stream else [r.json()]
        calls = [tc["function"] for x in lines for tc in x["message"].get("tool_calls") or []]
        text = "".join(x["message"]["content"] for x in lines)
        return [(c["name"], c["arguments"]) for c in calls], text, lines[-1]
    if api == "openai":
        body = {"model": "hermes", "messages": messages, "tools": TOOLS, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        r = client.post("/v1/chat/completions", json={**body, **extra})
        assert r.status_code == 200, r.text
        if stream:
            chunks = [json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: {")]
            deltas = [ch["choices"][0] for ch in chunks if ch["choices"]]
            calls = [tc["function"] for d in deltas for tc in d["delta"].get("tool_calls") or []]
            text = "".join(d["delta"].get("content") or "" for d in deltas)
            final = {"finish_reason": deltas[-1]["finish_reason"], "usage": chunks[-1]["usage"]}
        else:
            choice = r.json()["choices"][0]
            calls = [tc["function"] for tc in choice["message"].get("tool_calls") or []]
            text = choice["message"]["content"] or ""
            final = {"finish_reason": choice["finish_reason"], **r.json()}
        return [(c["name"], json.loads(c["arguments"])) for c in calls], text, final
    if api == "anthropic":
        body = {"model": "hermes", "messages": messages, "tools": ANTHROPIC_TOOLS,
                "max_tokens": 4096, "stream": stream}  # fmt: skip
        r = client.post("/v1/messages", json={**body, **extra})
        assert r.status_code == 200, r.text
        if stream:
            events = [json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: ")]
            blocks: dict[int, dict] = {}
            for e in events:
                if e["type"] == "content_block_start":
                    blocks[e["index"]] = {**e["content_block"], "json": ""}
                elif e["type"] == "content_block_delta":
                    d = e["delta"]
                    if d["type"] == "text_delta":
                        blocks[e["index"]]["text"] += d["text"]
                    elif d["type"] == "input_json_delta":
                        blocks[e["index"]]["json"] += d["partial_json"]
            content = [
                {**b, "input": json.loads(b["json"] or "{}")} if b["type"] == "tool_use" else b
                for b in blocks.values()
            ]
            delta = next(e for e in events if e["type"] == "message_delta")
            final = {**delta["delta"], "usage": delta["usage"]}
        else:
            content, final = r.json()["content"], r.json()
        calls = [(b["name"], b["input"]) for b in content if b["type"] == "tool_use"]
        text = "".join(b.get("text", "") for b in content if b["type"] == "text")
        return calls, text, final
    body = {"model": "hermes", "input": "Hey", "tools": RESPONSES_TOOLS, "stream": stream}
    r = client.post("/v1/responses", json={**body, **extra})
    assert r.status_code == 200, r.text
    if stream:
        events = [json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: ")]
        response = next(e for e in events if e["type"] == "response.completed")["response"]
    else:
        response = r.json()
    items = response["output"]
    calls = [(i["name"], json.loads(i["arguments"])) for i in items if i["type"] == "function_call"]
    text = "".join(
        c["text"] for i in items if i["type"] == "message" for c in i["content"] if "text" in c
    )
    return calls, text, response


APIS = ["ollama", "openai", "anthropic", "responses"]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [False, True])
def test_every_api_ends_a_runaway_turn_at_the_repeat(hermes_model, api, stream):
    words_per_call = len(HERMES_CALL.split())
    hermes_model.launcher.script = "\n".join([HERMES_CALL] * 200)
    calls, text, final = _ask(hermes_model.client, api, stream)
    assert calls == [CALL] and text.strip() == ""
    # the generation stopped at the repeat (the fake runner streams a word a chunk): the
    # second call's JSON is whole before its closing tag
    assert output_tokens(api, final) == 2 * words_per_call - 1  # the repeat's JSON is whole
    if api == "ollama":
        assert final["done_reason"] == "stop"
    elif api == "openai":
        assert final["finish_reason"] == "tool_calls"
    elif api == "anthropic":
        assert final["stop_reason"] == "tool_use"
    else:
        assert final["status"] == "completed"


@pytest.mark.parametrize(
    ("api", "extra"),
    [
        ("openai", {"parallel_tool_calls": False}),
        ("anthropic", {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}),
        ("responses", {"parallel_tool_calls": False}),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_parallel_calls_off_end_the_turn_at_the_first_call(hermes_model, api, extra, stream):
    other = HERMES_CALL.replace('"arg1": 1', '"arg1": 2')
    hermes_model.launcher.script = "\n".join([HERMES_CALL, other] * 100)
    calls, _, final = _ask(hermes_model.client, api, stream, **extra)
    assert calls == [CALL]
    # the generation stopped at the first call's last word (the fake streams a word a chunk)
    assert output_tokens(api, final) == len(HERMES_CALL.split()) - 1  # before "</tool_call>"


def output_tokens(api: str, final: dict) -> int:
    if api == "ollama":
        return int(final["eval_count"])
    if api == "openai":
        return int(final["usage"]["completion_tokens"])
    return int(final["usage"]["output_tokens"])


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [False, True])
def test_every_api_takes_a_fenced_call_and_leaves_other_blocks_as_text(hermes_model, api, stream):
    hermes_model.launcher.script = "Let me check. " + FENCED
    calls, text, _ = _ask(hermes_model.client, api, stream)
    assert (calls, text.strip()) == ([CALL], "Let me check.")
    # the same block naming no offered tool: text, as written
    block = FENCED.replace("special_function", "no_such_tool")
    hermes_model.launcher.script = "Let me check. " + block
    calls, text, _ = _ask(hermes_model.client, api, stream)
    assert calls == []
    assert text.split() == ("Let me check. " + block).split()  # the fake streams by words
