"""Building the prompt text: the chat template applied to the conversation.

The template is, in order: the request's `template`, the model's (a template layer from
`/api/create`), the GGUF's `tokenizer.chat_template`, the plugin's default, or a plain
"role: content" fallback. Templates are Jinja2 run in the sandbox (`templates.py`) with the
Hugging Face variables plus `prompt`, `system` and `suffix` for `/api/generate`.
Ollama's Go-template syntax (`{{ .Prompt }}`) is recognised and refused with a sentence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from ..request_types import ChatMessage
from .templates import TemplateError, compile_template, render_chat

__all__ = [
    "FALLBACK_TEMPLATE",
    "check_template",
    "conversation",
    "render",
    "IMAGE_TAG",
    "ImageContent",
    "with_images",
]

FALLBACK_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
IMAGE_TAG = "[img-{}]"  # the runner replaces these with the images' embeddings
_GO_TEMPLATE = re.compile(r"\{\{-?\s*(\.[A-Z]|if\s+\.|range\s+\.|end\s*-?\}\})")


# Phi-4 mini's own template reads the offered tools from the system message, as a JSON string
# (`message['tools']`; Microsoft's PhiCookBook sets `messages[0]['tools'] = json.dumps(tools)`)
_TOOLS_IN_SYSTEM = re.compile(r"""message\[\s*['"]tools['"]\s*\]|message\.tools\b""")


def tools_in_system_message(
    source: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """`messages` with the tools on the system message (one added first when there is none)
    where the template reads them from there; otherwise `messages` as they are."""
    if not tools or not _TOOLS_IN_SYSTEM.search(source):
        return messages
    listed = json.dumps(tools, ensure_ascii=False)
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "tools": listed}, *messages[1:]]
    return [{"role": "system", "content": "", "tools": listed}, *messages]


def check_template(source: str) -> None:
    """Raise TemplateError unless `source` is a Jinja template that compiles."""
    if _GO_TEMPLATE.search(source):
        raise TemplateError(
            "this template uses Go template syntax (Ollama's Modelfile TEMPLATE, e.g. "
            "'{{ .Prompt }}'); Hearth's templates are Jinja2, like a GGUF's "
            "tokenizer.chat_template (e.g. \"{% for m in messages %}{{ m['content'] }}"
            '{% endfor %}")'
        )
    compile_template(source)


class ImageContent(str):
    """A message's content with images, as templates see it: the string `[img-N]...[img-M]`
    + text (the images first, then the text, no space: as the reference chat templates and
    Ollama write it), which templates print and the runner splits at the tags; iterated, it
    yields Hugging Face's content items (`{"type": "image"}` per image, then
    `{"type": "text", "text": text}`), so a template that looks for image items finds them
    (Llama 3.2 Vision's writes its system block with the date only when it finds none)."""

    items: tuple[dict[str, str], ...]

    def __new__(cls, text: str, first: int, count: int) -> ImageContent:
        tags = "".join(IMAGE_TAG.format(first + i) for i in range(count))
        self = super().__new__(cls, tags + text)
        self.items = (*({"type": "image"} for _ in range(count)), {"type": "text", "text": text})
        return self

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)


def with_images(text: str, first: int, count: int) -> str:
    """`text` tagged with images `first`..`first + count - 1` (`ImageContent`), or `text`
    itself when there are none."""
    return ImageContent(text, first, count) if count else text


def _message(m: ChatMessage, image_offset: int) -> dict[str, Any]:
    content = with_images(m.content or "", image_offset, len(m.images or ()))
    out: dict[str, Any] = {"role": m.role, "content": content}
    if m.thinking:
        out["thinking"] = m.thinking
    if m.tool_calls:
        out["tool_calls"] = [
            {
                "type": "function",
                **({"id": c.id} if c.id else {}),
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in m.tool_calls
        ]
    if m.tool_name:
        out["name"] = m.tool_name
        out["tool_name"] = m.tool_name
    if m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
    return out


def conversation(
    messages: Sequence[ChatMessage], system: str | None = None, preset: Sequence[ChatMessage] = ()
) -> tuple[list[dict[str, Any]], list[str]]:
    """Template-ready message dicts and the images in order (tagged `[img-N]` in the text).

    `system` (the model's default) is used only when the conversation has no system message;
    `preset` messages (the model's own, from /api/create) come first."""
    items = list(preset) + list(messages)
    if system and not any(m.role == "system" for m in items):
        items.insert(0, ChatMessage.model_validate({"role": "system", "content": system}))
    out: list[dict[str, Any]] = []
    images: list[str] = []
    for m in items:
        out.append(_message(m, len(images)))
        images.extend(m.images or [])
    return out, images


def render(
    template: str | None,
    messages: list[dict[str, Any]],
    bos_text: str,
    eos_text: str,
    tools: list[dict[str, Any]] | None = None,
    think: bool | None = None,
    **extra: Any,
) -> str:
    source = template or FALLBACK_TEMPLATE
    check_template(source)
    variables: dict[str, Any] = dict(extra)
    if think is not None:
        variables["enable_thinking"] = think
    try:
        return render_chat(
            source,
            tools_in_system_message(source, messages, tools),
            add_generation_prompt=True,
            bos_token=bos_text,
            eos_token=eos_text,
            tools=tools,
            **variables,
        )
    except RecursionError:
        raise TemplateError("the chat template recursed too deeply") from None
