"""Model families' chat templates (tests/fixtures/chat_templates/) and the exact text each emits
for one tool call (llama.cpp's tests/test-chat.cpp), and a parser fed in pieces: shared by the
tool-format tests and the tool-turn tests."""

from __future__ import annotations

from pathlib import Path

from hearth.server.prompting.outputs import OutputParser

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
QWEN25 = "Qwen-Qwen2.5-7B-Instruct"
HERMES3 = "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"
LLAMA31 = "meta-llama-Llama-3.1-8B-Instruct"
LLAMA32 = "meta-llama-Llama-3.2-3B-Instruct"
NEMO = "mistralai-Mistral-Nemo-Instruct-2407"
MISTRAL_V11 = "mistralai-v11-tekken"
MISTRAL_V13 = "mistralai-v13-tekken"
DEEPSEEK_R1 = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"
DEEPSEEK_V31 = "deepseek-ai-DeepSeek-V3.1"
QWEN3 = "Qwen-Qwen3-0.6B"
QWEN3_CODER = "Qwen3-Coder"
MISTRAL_SMALL32 = "Mistral-Small-3.2-24B-Instruct-2506"
GEMMA2 = "google-gemma-2-2b-it"
PHI35 = "microsoft-Phi-3.5-mini-instruct"
PHI4_MINI = "microsoft-Phi-4-mini-instruct"  # Microsoft's own: tools on the system message
PHI4_MINI_LLAMACPP = "llama-cpp-microsoft-Phi-4-mini-instruct"  # llama.cpp's, renders calls
PHI4_TOKENS = {"<|tool|>", "<|/tool|>", "<|tool_call|>", "<|/tool_call|>", "<|end|>"}

SPECIAL = {"type": "object", "properties": {"arg1": {"type": "integer"}}, "required": ["arg1"]}
TOOLS = [
    {"type": "function", "function": {"name": "special_function", "description": "A tool.",
                                      "parameters": SPECIAL}},
    {"type": "function", "function": {"name": "python", "description": "Runs code.",
                                      "parameters": {"type": "object"}}},
]  # fmt: skip
NAMES = {"special_function", "python"}
CALL = ("special_function", {"arg1": 1})

# Each family's output for one call to special_function(arg1=1), as test-chat.cpp has it.
EMITTED = {
    QWEN25: '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
    HERMES3: '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
    LLAMA31: '{"name": "special_function", "parameters": {"arg1": 1}}',
    LLAMA32: '{"name": "special_function", "parameters": {"arg1": 1}}',
    NEMO: '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]',
    MISTRAL_V11: '[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{"arg1": 1}',
    MISTRAL_V13: '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}',
    QWEN3: '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
    QWEN3_CODER: "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n"
    "</function>\n</tool_call>",
    MISTRAL_SMALL32: '[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{"arg1": 1}',
    DEEPSEEK_V31: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>special_function<｜tool▁sep｜>"
    '{"arg1": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    PHI4_MINI_LLAMACPP: '<|tool_call|>{"name": "special_function", "arguments": {"arg1": 1}}'
    "<|/tool_call|>",
}


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


def run(parser: OutputParser, text: str, step: int = 1) -> tuple[str, str, list, list[str]]:
    """Feed `text` `step` characters at a time: (thinking, content, calls, content pieces)."""
    thinking, pieces = [], []
    for i in range(0, len(text), step):
        t, c = parser.feed(text[i : i + step])
        thinking.append(t)
        pieces.append(c)
    t, c, calls = parser.finish()
    thinking.append(t)
    pieces.append(c)
    return "".join(thinking), "".join(pieces), [(x.name, x.arguments) for x in calls], pieces
