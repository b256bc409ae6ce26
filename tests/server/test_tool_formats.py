"""Tool calls and thinking in each model family's own format, found from its real chat template.

The templates in tests/fixtures/chat_templates/ are the families' own (from their
tokenizer_config.json, as llama.cpp's models/templates/ and mistral-common keep them); the
model outputs are the exact text those models emit (llama.cpp's tests/test-chat.cpp).
"""

from __future__ import annotations

import json

import pytest

from hearth.plugins.testing import write_tiny_model
from hearth.server.prompting.outputs import OutputParser
from hearth.server.prompting.templates import render_chat
from hearth.server.prompting.toolformats import (
    MISTRAL_THINK,
    THINK_TAGS,
    detect_thinking_markers,
    detect_tool_format,
    marker_tokens,
)

from .fakes import add_model
from .tool_outputs import (
    CALL,
    DEEPSEEK_R1,
    DEEPSEEK_V31,
    EMITTED,
    GEMMA2,
    HERMES3,
    LLAMA31,
    LLAMA32,
    MISTRAL_SMALL32,
    MISTRAL_V11,
    MISTRAL_V13,
    NAMES,
    NEMO,
    PHI4_MINI,
    PHI4_MINI_LLAMACPP,
    PHI4_TOKENS,
    PHI35,
    QWEN3,
    QWEN3_CODER,
    QWEN25,
    TOOLS,
    run,
    template,
)
from tiny_models import tiny_llama


def parser_for(name: str, **kw) -> OutputParser:
    return OutputParser(tools=NAMES, format=detect_tool_format(template(name)), **kw)


# -- detection ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (QWEN25, "hermes"),
        (HERMES3, "hermes"),
        (LLAMA31, "llama3"),
        (LLAMA32, "llama3"),
        (NEMO, "mistral"),
        (MISTRAL_V11, "mistral"),
        (MISTRAL_V13, "mistral"),
        (DEEPSEEK_R1, "deepseek"),
        (GEMMA2, "none"),  # Gemma's stock template renders no tools
        (PHI35, "none"),  # nor does Phi-3.5's (the phi3 plugin's family)
        (QWEN3, "hermes"),
        (QWEN3_CODER, "qwen_xml"),
        (MISTRAL_SMALL32, "mistral"),
        (DEEPSEEK_V31, "deepseek"),
        (PHI4_MINI_LLAMACPP, "phi4"),
        (PHI4_MINI, "generic"),  # names no call marker: the vocabulary decides (below)
    ],
)
def test_the_format_is_read_from_the_template(name, expected):
    assert detect_tool_format(template(name)).name == expected


def test_tokens_decide_where_the_template_names_no_marker():
    plain = "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}"
    plain += "{% endfor %}"
    assert detect_tool_format(plain).name == "generic"
    assert detect_tool_format(plain, {"<tool_call>", "</tool_call>"}).name == "hermes"
    assert detect_tool_format(plain, {"[TOOL_CALLS]"}).name == "mistral"
    assert detect_tool_format(None).name == "none"


def test_thinking_markers_come_from_the_template_or_the_vocabulary():
    assert detect_thinking_markers(template(DEEPSEEK_R1)) == THINK_TAGS
    assert detect_thinking_markers(template(QWEN25)) is None
    assert detect_thinking_markers(template(PHI35)) is None
    assert detect_thinking_markers(template(QWEN3)) == THINK_TAGS
    assert detect_thinking_markers("x", {"[THINK]", "[/THINK]"}) == MISTRAL_THINK


# -- each family's own output ---------------------------------------------------------------


@pytest.mark.parametrize("name", list(EMITTED))
@pytest.mark.parametrize("step", [1, 3, 1000])
def test_each_family_call_is_parsed_however_it_streams(name, step):
    thinking, content, calls, _ = run(parser_for(name), EMITTED[name], step)
    assert (thinking, content, calls) == ("", "", [CALL])


@pytest.mark.parametrize("name", list(EMITTED))
def test_what_the_template_renders_for_a_call_parses_back(name):
    """A template renders earlier calls the way its model writes them: parsing that text
    gives the call back (the format and the template agree)."""
    call = {"type": "function", "id": "123456789",
            "function": {"name": "special_function", "arguments": {"arg1": 1}}}  # fmt: skip
    messages = [
        {"role": "user", "content": "Hey"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "done", "tool_call_id": "123456789"},
    ]
    tpl = template(name)
    text = render_chat(tpl, messages, False, "<s>", "</s>", tools=TOOLS)
    reply = text[text.rindex("Hey") + 3 : text.rindex("done")]
    fmt = detect_tool_format(tpl)
    calls, _ = fmt.parse(reply[min(i for o in fmt.anywhere + fmt.at_start
                                   if (i := reply.find(o)) >= 0):], NAMES)  # fmt: skip
    assert [(c.name, c.arguments) for c in calls] == [CALL]


def test_qwen_parallel_calls_after_text():
    text = (
        "Let me check both.\n"
        '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "python", "arguments": {"code": "print(\'hey\')"}}\n</tool_call>'
    )
    thinking, content, calls, pieces = run(parser_for(QWEN25), text, 4)
    assert calls == [CALL, ("python", {"code": "print('hey')"})]
    assert content == "Let me check both.\n"
    assert pieces[-1] == ""  # the text before the calls streamed, it was not held to the end


def test_llama_python_tag_and_builtin_calls():
    p = parser_for(LLAMA31)
    text = '<|python_tag|>{"name": "special_function", "parameters": {"arg1": 1}}'
    assert run(p, text, 5)[1:3] == ("", [CALL])
    # test-chat.cpp's builtin-tool call is code, not JSON: it comes back as text
    builtin = "<|python_tag|>python.call(code=\"print('hey')\")"
    assert run(parser_for(LLAMA31), builtin, 2)[1:3] == (builtin, [])
    two = '{"name": "special_function", "parameters": {"arg1": 1}}; {"name": "python", '
    two += '"parameters": {"code": "1"}}'
    assert run(parser_for(LLAMA32), two)[2] == [CALL, ("python", {"code": "1"})]


def test_mistral_parallel_calls_in_both_forms():
    old = '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}}, '
    old += '{"name": "python", "arguments": {"code": "1"}}]'
    new = '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}[TOOL_CALLS]python[ARGS]{"code": "1"}'
    for name, text in ((NEMO, old), (MISTRAL_V13, new)):
        assert run(parser_for(name), text, 2)[1:3] == ("", [CALL, ("python", {"code": "1"})])


def test_deepseek_r1_thinks_then_calls():
    text = (
        "I'm\nthinking</think>\n\n"
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n"
        '```json\n{"arg1": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    p = parser_for(DEEPSEEK_R1, think=True, thinking_started=True)
    assert run(p, text, 3)[:3] == ("I'm\nthinking", "", [CALL])


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (QWEN25, '<tool_call>\n{"name": "special_function", "arguments": {"arg1": </tool_call>'),
        (QWEN25, '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'),  # not offered
        (LLAMA31, '{"name": "special_function", "parameters": [1]}'),
        (NEMO, '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}'),
        (MISTRAL_V13, "[TOOL_CALLS]special_function[ARGS]{oops"),
        (DEEPSEEK_R1, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>x"),
    ],
)
def test_a_call_that_does_not_parse_comes_back_as_text(name, text):
    assert run(parser_for(name), text, 2)[1:3] == (text, [])


def test_one_bad_call_among_good_ones_is_kept_as_text():
    bad = '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>'
    text = EMITTED[QWEN25] + "\n" + bad
    assert run(parser_for(QWEN25), text)[1:3] == (bad, [CALL])


def test_plain_text_with_braces_streams_for_tag_formats():
    text = "Use {braces} and [brackets] freely."
    _, content, calls, pieces = run(parser_for(QWEN25), text, 4)
    assert (content, calls) == (text, []) and pieces[-1] == ""


def test_thinking_can_be_dropped():
    p = OutputParser(think=True, hide_thinking=True)
    assert run(p, "<think>secret</think>Answer", 2)[:2] == ("", "Answer")


# -- through the routes ---------------------------------------------------------------------


@pytest.fixture
def family_models(fake_service, tmp_path):
    """One tiny model per family, its real template written into the GGUF."""
    for i, name in enumerate([*EMITTED, DEEPSEEK_R1]):
        path = write_tiny_model(
            tmp_path / f"{i}.gguf",
            tiny_llama(layers=1, embd=32, ff=64, chat_template=template(name)),
        )
        add_model(fake_service.store, f"fam{i}", path)
    return fake_service


# DeepSeek V3.1's template renders earlier calls but not the offered tools (their description
# goes in the system message), so the service does not offer it tools (capability "tools").
ROUTED = [name for name in EMITTED if name != DEEPSEEK_V31]


@pytest.mark.parametrize("index", [list(EMITTED).index(name) for name in ROUTED])
@pytest.mark.parametrize("stream", [False, True])
def test_both_chat_routes_give_each_family_the_same_tool_calls(family_models, index, stream):
    name = list(EMITTED)[index]
    # Llama writes its bare JSON call as the whole reply; the others may say something first
    before = "" if name in (LLAMA31, LLAMA32) else "Calling it. "
    family_models.launcher.script = before + EMITTED[name]
    c = family_models.client
    messages = [{"role": "user", "content": "Hey"}]
    body = {"model": f"fam{index}", "messages": messages, "tools": TOOLS, "stream": stream}
    native = c.post("/api/chat", json=body)
    assert native.status_code == 200, native.text
    openai = c.post("/v1/chat/completions", json=body)
    assert openai.status_code == 200, openai.text
    if stream:
        lines = [json.loads(x) for x in native.text.splitlines() if x]
        native_calls = [tc for x in lines for tc in x["message"].get("tool_calls", [])]
        native_text = "".join(x["message"]["content"] for x in lines)
        events = [x[6:] for x in openai.text.splitlines() if x.startswith("data: {")]
        chunks = [json.loads(e) for e in events]
        deltas = [ch["choices"][0]["delta"] for ch in chunks if ch["choices"]]
        oa_calls = [tc["function"] for d in deltas for tc in d.get("tool_calls") or []]
        oa_text = "".join(d.get("content") or "" for d in deltas)
    else:
        native_calls = native.json()["message"].get("tool_calls", [])
        native_text = native.json()["message"]["content"]
        msg = openai.json()["choices"][0]["message"]
        oa_calls = [tc["function"] for tc in msg.get("tool_calls") or []]
        oa_text = msg["content"]
    assert [(x["function"]["name"], x["function"]["arguments"]) for x in native_calls] == [CALL]

    assert [(x["name"], json.loads(x["arguments"])) for x in oa_calls] == [CALL]
    assert native_text.strip() == oa_text.strip() == before.strip()


def test_a_model_that_thinks_by_default_keeps_thinking_out_of_the_content(family_models):
    index = len(EMITTED)  # DeepSeek R1: its prompt ends inside <think>
    family_models.launcher.script = "I'm thinking</think>Hello, world!"
    c = family_models.client
    body = {"model": f"fam{index}", "messages": [{"role": "user", "content": "Hey"}]}
    msg = c.post("/api/chat", json={**body, "stream": False}).json()["message"]
    assert (msg["thinking"], msg["content"]) == ("I'm thinking", "Hello, world!")
    msg = c.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert (msg["reasoning"], msg["content"]) == ("I'm thinking", "Hello, world!")
    msg = c.post("/api/chat", json={**body, "stream": False, "think": False}).json()["message"]
    assert "thinking" not in msg and msg["content"] == "Hello, world!"


def test_marker_tokens_are_the_markers_in_a_vocabulary():
    vocab = {"<tool_call>", "</tool_call>", "<think>", "hello", "[INST]"}
    assert marker_tokens(vocab) == {"<tool_call>", "</tool_call>", "<think>"}


@pytest.mark.parametrize(
    "name", [QWEN25, LLAMA31, NEMO, MISTRAL_V11, MISTRAL_V13, DEEPSEEK_R1, DEEPSEEK_V31]
)
def test_arguments_can_be_streamed_as_they_are_written(name):
    """partial_calls: each call's arguments text only grows, and ends as the whole object."""
    text = EMITTED.get(name) or (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n"
        '```json\n{"arg1": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    text += text.replace("special_function", "python").replace('"arg1": 1', '"code": "x"')
    p = parser_for(name)
    seen: dict[int, str] = {}
    for ch in text:
        p.feed(ch)
        for i, call in enumerate(p.partial_calls()):
            assert call.arguments.startswith(seen.get(i, "")), (seen, call)
            seen[i] = call.arguments
    assert [json.loads(seen[i]) for i in sorted(seen)] == [{"arg1": 1}, {"code": "x"}]
    calls = p.finish()[2]
    assert [(c.name, c.arguments) for c in calls] == [CALL, ("python", {"code": "x"})]


def test_qwen3_coder_parallel_xml_calls_with_code():
    """test-chat.cpp's Qwen3-Coder outputs: parallel calls, a multi-line code parameter."""
    text = (
        "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n"
        "</function>\n</tool_call>\n"
        "<tool_call>\n<function=python>\n<parameter=code>\n"
        'def hello():\n    print("Hello, world!")\n\nhello()\n'
        "</parameter>\n</function>\n</tool_call>"
    )
    code = 'def hello():\n    print("Hello, world!")\n\nhello()'
    assert run(parser_for(QWEN3_CODER), text, 3)[1:3] == ("", [CALL, ("python", {"code": code})])


def test_qwen3_thinks_then_calls():
    text = "<think>\nThe user wants it.\n</think>\n\n" + EMITTED[QWEN3]
    fmt = detect_tool_format(template(QWEN3))
    p = OutputParser(think=True, tools=NAMES, format=fmt)
    thinking, content, calls, _ = run(p, text, 2)
    assert (thinking.strip(), content, calls) == ("The user wants it.", "", [CALL])


def test_deepseek_v31_reasoning_content_and_parallel_calls():
    """test-chat.cpp's DeepSeek V3.1 output (its prompt ends inside <think>)."""
    text = (
        "REASONING</think>CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>special_function"
        '<｜tool▁sep｜>{"arg1": 1}<｜tool▁call▁end｜><｜tool▁call▁begin｜>python<｜tool▁sep｜>'
        '{"code": "1"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    p = parser_for(DEEPSEEK_V31, think=True, thinking_started=True)
    assert run(p, text, 4)[:3] == ("REASONING", "CONTENT", [CALL, ("python", {"code": "1"})])


def test_mistral_small_32_text_then_parallel_calls():
    text = (
        "Hello, world!\nWhat's up?"
        '[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{"arg1": 1}'
        '[TOOL_CALLS]python[CALL_ID]000000002[ARGS]{"code": "1"}'
    )
    _, content, calls, pieces = run(parser_for(MISTRAL_SMALL32), text, 5)
    assert (content, calls) == ("Hello, world!\nWhat's up?", [CALL, ("python", {"code": "1"})])
    assert pieces[-1] == ""


def test_deeply_nested_brackets_are_text_not_an_error():
    text = "[" * 5000
    assert run(OutputParser(tools=NAMES), text, 500)[1:3] == (text, [])


def test_phi4_mini_tools_go_on_the_system_message_and_its_calls_parse():
    """Microsoft's Phi-4 mini template reads the tools from the system message as a JSON
    string (as the PhiCookBook renders it) and names no call marker; its vocabulary's
    `<|tool_call|>` picks the format, and its model writes a list of calls in one block."""
    from hearth.server.prompting.prompts import render

    tpl = template(PHI4_MINI)
    messages = [{"role": "user", "content": "Hey"}]
    text = render(tpl, messages, "", "<|endoftext|>", tools=TOOLS)
    assert text == (
        "<|system|><|tool|>" + json.dumps(TOOLS) + "<|/tool|><|end|><|user|>Hey<|end|><|assistant|>"
    )
    with_system = [{"role": "system", "content": "Be brief."}, *messages]
    text = render(tpl, with_system, "", "<|endoftext|>", tools=TOOLS)
    assert text.startswith("<|system|>Be brief.<|tool|>[{")
    plain = "<|system|>Be brief.<|end|><|user|>Hey<|end|><|assistant|>"
    assert render(tpl, with_system, "", "") == plain
    fmt = detect_tool_format(tpl, PHI4_TOKENS)
    assert fmt.name == "phi4"
    emitted = (
        'Checking.<|tool_call|>[{"name": "special_function", "arguments": {"arg1": 1}}, '
        '{"name": "python", "arguments": {"code": "1+1"}}]<|/tool_call|>'
    )
    for step in (1, 4, 1000):
        parser = OutputParser(tools=NAMES, format=fmt)
        _, content, calls, _ = run(parser, emitted, step)
        assert content == "Checking."
        assert calls == [CALL, ("python", {"code": "1+1"})]
    parser = OutputParser(tools=NAMES, format=fmt)
    _, content, calls, _ = run(parser, "<|tool_call|>[1, 2]<|/tool_call|>")
    assert (content, calls) == ("<|tool_call|>[1, 2]<|/tool_call|>", [])
    assert "<|tool_call|>" in marker_tokens(PHI4_TOKENS | {"hello"})
