"""Request bodies of Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`),
as the `anthropic` package's `MessageCreateParams` and `MessageCountTokensParams` define them.

Unknown fields are ignored (`cache_control`, `metadata`, `service_tier`, `container`, ...:
hints that cannot change a local model's answer). Extensions: `options` (Ollama's options, as
on the OpenAI routes) and `keep_alive`. Anthropic's own sampling fields `temperature`,
`top_p` and `top_k` are read from the body (the 2.x client sends them through `extra_body`).

Content blocks: `text`; `image` with a base64 `source` (other sources and media types are
refused with a sentence); `tool_use` and `thinking` / `redacted_thinking` in assistant turns;
`tool_result` (content a string or text and image blocks, `is_error`) in user turns. Other
block types (documents, search results, server tools) are refused: a 400 naming the type.
Tools are client tools (`name`, `description`, `input_schema`); Anthropic's server tools
(web search, code execution, ...) are refused.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..ollama.schemas import HearthExtensions

__all__ = [
    "ContentBlock",
    "CountTokensRequest",
    "ImageBlock",
    "MessageParam",
    "MessagesRequest",
    "PromptedRequest",
    "TextBlock",
    "ThinkingBlock",
    "Tool",
    "ToolChoice",
    "ToolResultBlock",
    "ToolUseBlock",
]

_Model = Annotated[str, Field(min_length=1, max_length=250, examples=["gemma3:270m"])]
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


def _invalid(message: str, **ctx: Any) -> PydanticCustomError:
    return PydanticCustomError("invalid_request", message, ctx)


class TextBlock(_Body):
    type: Literal["text"]
    text: str


class ImageSource(_Body):
    type: str
    media_type: str | None = None
    data: str | None = Field(None, max_length=64 << 20)

    @model_validator(mode="after")
    def _base64(self) -> ImageSource:
        if self.type != "base64":
            raise _invalid(
                "image source type '{kind}' is not supported: send the image as "
                '{{"type": "base64", "media_type": ..., "data": ...}}',
                kind=self.type[:40],
            )
        if self.media_type not in IMAGE_TYPES:
            raise _invalid(
                "image media_type must be one of image/jpeg, image/png, image/gif, image/webp"
            )
        if not self.data:
            raise _invalid("an image source needs data (the image in base64)")
        return self


class ImageBlock(_Body):
    type: Literal["image"]
    source: ImageSource


class ToolUseBlock(_Body):
    type: Literal["tool_use"]
    id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=256)
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(_Body):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1, max_length=256)
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]] = ""
    is_error: bool | None = None


class ThinkingBlock(_Body):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Body):
    type: Literal["redacted_thinking"]
    data: str = ""


ContentBlock = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]
_BLOCKS = ("text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking")
_USER_BLOCKS = ("text", "image", "tool_result")
_ASSISTANT_BLOCKS = ("text", "tool_use", "thinking", "redacted_thinking")


def _known_blocks(v: Any) -> Any:
    """A sentence naming an unsupported block type (before the union's terser message)."""
    for item in v if isinstance(v, list) else []:
        kind = item.get("type") if isinstance(item, dict) else None
        if isinstance(kind, str) and kind not in _BLOCKS:
            raise _invalid(
                "content block type '{kind}' is not supported; use text, image, tool_use, "
                "tool_result or thinking",
                kind=kind[:40],
            )
    return v


class MessageParam(_Body):
    """One turn: a user's text, images and tool results, or the assistant's text, thinking
    and tool calls."""

    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]

    @field_validator("content", mode="before")
    @classmethod
    def _supported_blocks(cls, v: Any) -> Any:
        return _known_blocks(v)

    @model_validator(mode="after")
    def _blocks_fit_role(self) -> MessageParam:
        allowed = _USER_BLOCKS if self.role == "user" else _ASSISTANT_BLOCKS
        for block in self.content if isinstance(self.content, list) else []:
            if block.type not in allowed:
                raise _invalid(
                    "a {role} message cannot hold a {kind} block", role=self.role, kind=block.type
                )
        return self


class Tool(_Body):
    """A client tool. `type` is "custom" or absent; Anthropic's server tools are refused."""

    type: str | None = None
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})

    @model_validator(mode="after")
    def _client_tool(self) -> Tool:
        if self.type not in (None, "custom"):
            raise _invalid(
                "tool type '{kind}' (an Anthropic server tool) is not supported; give client "
                "tools (name, description, input_schema)",
                kind=self.type[:40],
            )
        return self


class ToolChoice(_Body):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _named(self) -> ToolChoice:
        if self.type == "tool" and not self.name:
            raise _invalid('tool_choice {{"type": "tool"}} needs the name of the tool')
        return self


class ThinkingConfig(_Body):
    """`enabled` turns the model's thinking on (`budget_tokens` is not enforced: the model
    thinks as its template lets it, within max_tokens), `disabled` off; `adaptive` leaves
    it to the model's default."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=0, le=1 << 24)


class PromptedRequest(HearthExtensions, _Body):
    """What both routes render into a prompt: the model, system text, messages and tools."""

    model: _Model
    messages: list[MessageParam] = Field(min_length=1, max_length=10000)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = Field(None, max_length=128)
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None


class MessagesRequest(PromptedRequest):
    max_tokens: int = Field(ge=1, le=1 << 24)
    stop_sequences: list[Annotated[str, Field(max_length=1000)]] | None = Field(None, max_length=64)
    stream: bool = False
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0, le=1 << 20)
    metadata: dict[str, Any] | None = None  # ignored


class CountTokensRequest(PromptedRequest):
    pass
