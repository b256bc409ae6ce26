"""Request bodies of the OpenAI-compatible API (`/v1/...`), as Ollama accepts them.

Unknown fields are ignored, as OpenAI and Ollama do. Extensions: `options` (Ollama's options,
e.g. `num_ctx`, which OpenAI has no way to set) and `keep_alive`. Messages are checked as
OpenAI checks them (a 400 naming the message): system, developer and user messages need
`content`; an assistant message needs `content` or `tool_calls`; a tool message needs `content`
and `tool_call_id`; a (deprecated) function message needs `name`.

Every field OpenAI defines is honoured, refused with a 400 sentence when set to a value Hearth
cannot honour (`convert.check_chat` / `check_sampling`, and the routes), or ignored
when honouring it could not change the answer:

| field                                | decision                                               |
|--------------------------------------|--------------------------------------------------------|
| messages[].role                      | system, developer, user, assistant, tool or function;  |
|                                      | others refused                                         |
| n, best_of (> 1)                     | refused: one completion per request                    |
| echo, token-id prompts or inputs     | refused                                                |
| logit_bias (non-empty)               | refused: the sampler has no per-token bias             |
| audio, modalities with "audio"       | refused: Hearth answers in text only                   |
| input_audio and file content parts   | refused: text and images only                          |
| functions, function_call (request)   | refused: the deprecated form of tools; give `tools`    |
|                                      | and `tool_choice` (replies carry `tool_calls`)         |
| web_search_options                   | refused: Hearth does not search the web                |
| options.typical_p (not 1)            | refused, as on the native API                          |
| tool_choice                          | honoured: "none" offers no tools; "required", a named  |
|                                      | function or allowed_tools (mode required) force a call |
|                                      | by constraining the output to the tools' schemas       |
|                                      | (with response_format too: refused); a named function  |
|                                      | or allowed_tools offers only the tools it names        |
| parallel_tool_calls: false           | honoured: at most one call per reply                   |
| reasoning_effort                     | honoured: "none" turns thinking off, a level turns it  |
|                                      | on and reaches the template as `reasoning_effort`      |
| response_format json_schema `strict` | honoured: the output always conforms (grammar)         |
| function message, assistant          | honoured: in the history, as a tool message and a tool |
| function_call, refusal content parts | call; refusal parts as text                            |
| developer role                       | honoured: as a system message                          |
| user, metadata, store, service_tier, | ignored: bookkeeping or caching hints that cannot      |
| prompt_cache_key, safety_identifier, | change the answer (the prompt cache is automatic)      |
| prediction                           |                                                        |
| image_url.detail, `name` of a user,  | ignored: hints with no counterpart in a local model's  |
| system or assistant message,         | prompt (a tool or function message's `name` is used)   |
| verbosity, assistant `refusal`       |                                                        |
| stream_options without stream        | ignored                                                |
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ...request_types import Options
from ..ollama.schemas import HearthExtensions, KeepAlive

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
_Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class ImageURL(_Body):
    url: str = Field(max_length=64 << 20)
    detail: str | None = None


class ContentPart(_Body):
    type: Literal["text", "image_url", "input_text", "refusal", "input_audio", "file"]
    text: str | None = None
    image_url: ImageURL | str | None = None
    refusal: str | None = None


class OAFunctionCall(_Body):
    name: str = Field(min_length=1, max_length=256)
    arguments: str = "{}"


class OAToolCall(_Body):
    id: str | None = None
    type: str = "function"
    function: OAFunctionCall


_UNSUPPORTED_PARTS = {
    "input_audio": "audio input is not supported; send text and images",
    "file": "file inputs are not supported; send the file's text as a text part",
}


def _invalid(message: str) -> PydanticCustomError:
    return PydanticCustomError("invalid_message", message)


_Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
_ROLES = get_args(_Role)


class OAMessage(_Body):
    """One message of a chat, checked per role as OpenAI checks it (see the module)."""

    role: _Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[OAToolCall] | None = None
    function_call: OAFunctionCall | None = None  # deprecated form of one tool call
    tool_call_id: str | None = None
    reasoning: str | None = None  # an assistant's thinking (Ollama's name)
    reasoning_content: str | None = None  # the same (DeepSeek's, llama.cpp's, vLLM's name)

    @field_validator("role", mode="before")
    @classmethod
    def _known_role(cls, v: Any) -> Any:
        if isinstance(v, str) and v not in _ROLES:
            raise PydanticCustomError(
                "role",
                "'{role}' is not a message role; use system, developer, user, assistant, tool "
                "or function",
                {"role": v[:40]},
            )
        return v

    @model_validator(mode="after")
    def _complete(self) -> OAMessage:
        for part in self.content if isinstance(self.content, list) else []:
            if part.type in _UNSUPPORTED_PARTS:
                raise _invalid(_UNSUPPORTED_PARTS[part.type])
        if self.role == "assistant":
            if self.content is None and not self.tool_calls and self.function_call is None:
                raise _invalid("an assistant message needs content or tool_calls")
        elif self.role == "function":
            if not self.name:
                raise _invalid("a function message needs the function's name")
        elif self.content is None:
            raise _invalid(
                f"a {self.role} message needs content (a string or a list of content parts)"
            )
        if self.role == "tool" and not self.tool_call_id:
            raise _invalid("a tool message needs tool_call_id, the id of the call it answers")
        return self


class JSONSchemaFormat(_Body):
    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class SamplingFields(HearthExtensions, _Body):
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
    logit_bias: dict[str, float] | None = None  # refused when not empty
    user: str | None = None


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
    # "none" | "auto" | "required" | {"type": "function", "function": {"name"}} |
    # {"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}: see convert
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    reasoning_effort: _Effort | None = None
    # refused when set (convert.check_chat)
    audio: dict[str, Any] | None = None
    modalities: list[str] | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None


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
