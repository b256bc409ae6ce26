"""Service settings and the pieces of request handling that need no HTTP: durations, hosts,
templates, conversations and the output parser."""

from __future__ import annotations

import pytest

from hearth.server.config import FOREVER, ConfigError, ServerConfig, parse_duration, parse_host
from hearth.server.prompting.outputs import OutputParser, parse_tool_calls
from hearth.server.prompting.prompts import FALLBACK_TEMPLATE, check_template, conversation, render
from hearth.server.prompting.templates import TemplateError
from hearth.server.request_types import ChatMessage


@pytest.mark.parametrize(
    "value, seconds",
    [("5m", 300), ("1h30m", 5400), ("300ms", 0.3), (10, 10), ("10", 10), (0, 0), ("0", 0),
     (-1, FOREVER), ("-1m", FOREVER), ("1.5h", 5400)],
)  # fmt: skip
def test_durations(value, seconds):
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["soon", "5 minutes", "", "1x", True, [], float("nan")])
def test_bad_durations_are_sentences(value):
    with pytest.raises(ConfigError, match="keep_alive"):
        parse_duration(value)


@pytest.mark.parametrize(
    "text, expected",
    [("127.0.0.1", ("127.0.0.1", 11434)), ("0.0.0.0:8080", ("0.0.0.0", 8080)),
     (":9000", ("127.0.0.1", 9000)), ("http://localhost:1234/", ("localhost", 1234)),
     ("[::1]:5000", ("::1", 5000))],
)  # fmt: skip
def test_hosts(text, expected):
    assert parse_host(text) == expected


def test_environment_and_exposure():
    config = ServerConfig.from_env(
        {"HEARTH_HOST": "0.0.0.0:9999", "HEARTH_KEEP_ALIVE": "-1", "HEARTH_NUM_PARALLEL": "2",
         "HEARTH_ORIGINS": "https://example.com, http://*.test"}
    )  # fmt: skip
    assert (config.host, config.port, config.keep_alive, config.num_parallel) == (
        "0.0.0.0", 9999, FOREVER, 2,
    )  # fmt: skip
    assert config.origins == ("https://example.com", "http://*.test")
    with pytest.raises(ConfigError, match="HEARTH_API_KEY"):
        config.check_exposure()
    ServerConfig.from_env({"HEARTH_HOST": "0.0.0.0", "HEARTH_API_KEY": "k"}).check_exposure()
    ServerConfig.from_env({}).check_exposure()  # loopback needs no key
    with pytest.raises(ConfigError, match="HEARTH_NUM_PARALLEL"):
        ServerConfig.from_env({"HEARTH_NUM_PARALLEL": "many"})
    assert ServerConfig.from_env({}, host="0.0.0.0", port=0).port == 0


def test_gpu_context_is_the_measured_constant_unless_set():
    assert ServerConfig.from_env({}).gpu_context is None
    assert ServerConfig.from_env({"HEARTH_GPU_CONTEXT": "700000000"}).gpu_context == 700_000_000
    assert ServerConfig.from_env({"HEARTH_GPU_CONTEXT": "0"}).gpu_context == 0
    with pytest.raises(ValueError, match="HEARTH_GPU_CONTEXT"):
        ServerConfig.from_env({"HEARTH_GPU_CONTEXT": "lots"})


def test_go_templates_are_refused_with_a_sentence():
    with pytest.raises(TemplateError, match="Go template"):
        check_template("{{ if .System }}{{ .System }}{{ end }}{{ .Prompt }}")
    with pytest.raises(TemplateError, match="syntax error"):
        check_template("{% for m in messages %}")
    check_template(FALLBACK_TEMPLATE)


def test_conversation_adds_the_model_system_prompt_and_image_tags():
    msgs = [ChatMessage(role="user", content="hi", images=["AAAA", "BBBB"])]
    out, images = conversation(msgs, system="Be brief.")
    assert out[0] == {"role": "system", "content": "Be brief."}
    assert out[1]["content"] == "[img-0][img-1]hi" and images == ["AAAA", "BBBB"]  # as Ollama
    own = [ChatMessage(role="system", content="Mine."), ChatMessage(role="user", content="x")]
    assert conversation(own, system="Be brief.")[0][0]["content"] == "Mine."


def test_render_passes_tools_and_tokens():
    tpl = "{{ bos_token }}{% if tools %}T:{{ tools[0].function.name }}|{% endif %}" \
          "{% for m in messages %}{{ m.content }}{% endfor %}"  # fmt: skip
    tools = [{"type": "function", "function": {"name": "weather"}}]
    assert render(tpl, [{"role": "user", "content": "x"}], "<s>", "</s>", tools) == "<s>T:weather|x"
    with pytest.raises(TemplateError, match="unsafe"):
        render("{{ ''.__class__.__mro__ }}", [], "", "")


def test_tool_calls_are_found_in_the_usual_wrappings():
    names = {"get_weather"}
    for text in [
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        '```json\n[{"name": "get_weather", "parameters": {"city": "Paris"}}]\n```',
        '{"function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}',
    ]:
        calls = parse_tool_calls(text, names)
        assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert parse_tool_calls('{"name": "rm_rf", "arguments": {}}', names) == []


def test_output_parser_streams_plain_text_and_holds_tool_calls():
    p = OutputParser(tools={"f"})
    assert p.feed("Hello") == ("", "Hello")
    assert p.feed(" there") == ("", " there")
    assert p.finish() == ("", "", [])
    p = OutputParser(tools={"f"})
    assert p.feed(' {"name": "f",') == ("", "")
    assert p.feed(' "arguments": {"a": 1}}') == ("", "")
    thinking, content, calls = p.finish()
    assert content == "" and [(c.name, c.arguments) for c in calls] == [("f", {"a": 1})]
    p = OutputParser(tools={"f"})
    p.feed("{not a call")
    assert p.finish() == ("", "{not a call", [])  # held text comes back when it is no call


def test_output_parser_splits_thinking():
    p = OutputParser(think=True)
    assert p.feed("<thi") == ("", "")
    assert p.feed("nk>pondering</th") == ("pondering", "")
    assert p.feed("ink>The answer") == ("", "The answer")
    assert p.finish() == ("", "", [])
