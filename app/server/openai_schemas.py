"""Request bodies of the OpenAI-compatible API (`/v1/...`), as Ollama accepts them.

Unknown fields are ignored; fields OpenAI defines but Hearth cannot honour (`n` > 1, `echo`,
`best_of` > 1, token-id prompts) are refused with a 400 by the routes. Extensions: `options`
(Ollama's options, e.g. `num_ctx`, which OpenAI has no way to set) and `keep_alive`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .schemas import KeepAlive, Options

__all__ = [
    "OAChatRequest",
    "OACompletionRequest",
    "OAEmbeddingRequest",
    "OAMessage",
    "ResponseFormat",
    "SamplingFields",
]

_Model = Annotated[str, Field(min_length=1, max_length=250, examples=["gemma3:270m"])]
_Stop = str | list[Annotated[str, Field(max_length=1000)]] | None


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class ImageURL(_Body):
    url: str = Field(max_length=64 << 20)
    detail: str | None = None


class ContentPart(_Body):
    type: Literal["text", "image_url", "input_text"]
    text: str | None = None
    image_url: ImageURL | str | None = None


class OAFunctionCall(_Body):
    name: str = Field(min_length=1, max_length=256)
    arguments: str = "{}"


class OAToolCall(_Body):
    id: str | None = None
    type: str = "function"
    function: OAFunctionCall


class OAMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[OAToolCall] | None = None
    tool_call_id: str | None = None
    reasoning: str | None = None


class JSONSchemaFormat(_Body):
    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class SamplingFields(_Body):
    model: _Model
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    seed: int | None = Field(None, ge=-1, le=2**63 - 1)
    stop: _Stop = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=0, le=1 << 24)
    n: int | None = Field(None, ge=1, le=128)
    user: str | None = None
    options: Options | None = None  # Hearth / Ollama extension
    keep_alive: KeepAlive = None  # extension


class FunctionDef(_Body):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class OATool(_Body):
    type: Literal["function"] = "function"
    function: FunctionDef


class OAChatRequest(SamplingFields):
    messages: list[OAMessage] = Field(min_length=1, max_length=10000)
    max_completion_tokens: int | None = Field(None, ge=0, le=1 << 24)
    response_format: ResponseFormat | None = None
    tools: list[OATool] | None = Field(None, max_length=128)
    tool_choice: Any = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    reasoning_effort: Literal["none", "low", "medium", "high", "max"] | None = None


class OACompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]] = Field(examples=["Once upon a time"])
    suffix: str | None = None
    echo: bool = False
    best_of: int | None = Field(None, ge=1, le=128)
    logprobs: int | None = Field(None, ge=0, le=20)


class OAEmbeddingRequest(_Body):
    model: _Model
    input: str | list[str] | list[int] | list[list[int]] = Field(examples=["hello"])
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1, le=1 << 16)
    user: str | None = None
    keep_alive: KeepAlive = None
    options: Options | None = None
