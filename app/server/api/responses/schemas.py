"""Request body of OpenAI's Responses API (`POST /v1/responses`), as the `openai` package's
`ResponseCreateParams` defines it.

Unknown fields are ignored, as OpenAI and Ollama do. Extensions: `options` (Ollama's options,
e.g. `num_ctx`) and `keep_alive`, as on the other `/v1` routes. Input items are checked by
`responses.convert` (a 400 naming the item), so that each refusal is a sentence:

| field                                   | decision                                            |
|-----------------------------------------|-----------------------------------------------------|
| input: string, message, function_call,  | honoured (messages: input_text, input_image as a    |
| function_call_output, reasoning items   | data: URL, output_text and refusal parts)           |
| input_image by URL or file_id,          | refused: Hearth fetches nothing and keeps no files  |
| input_file, input_audio, item_reference,|                                                     |
| hosted tools' items                     |                                                     |
| tools of a type other than function     | refused, naming the type                            |
| tool_choice                             | honoured as on chat completions (none, auto,        |
|                                         | required, a function, allowed_tools)                |
| text.format                             | text, json_object, json_schema (grammar-constrained)|
| reasoning.effort                        | "none" turns thinking off, a level turns it on      |
| previous_response_id, store             | honoured: responses are kept in memory (see         |
|                                         | responses.store)                                    |
| background, conversation, prompt        | refused: no background jobs, conversations objects  |
|                                         | or stored prompts                                   |
| include, metadata, user, service_tier,  | ignored (metadata is echoed back)                   |
| truncation, prompt_cache_key,           |                                                     |
| safety_identifier, max_tool_calls,      |                                                     |
| top_logprobs, text.verbosity,           |                                                     |
| reasoning.summary                       |                                                     |
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..ollama.schemas import HearthExtensions

__all__ = ["ResponsesRequest", "TextConfig", "TextFormat", "ReasoningConfig", "FunctionTool"]

_Model = Annotated[str, Field(min_length=1, max_length=250, examples=["gemma3:270m"])]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, populate_by_name=True)


class TextFormat(_Body):
    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None
    description: str | None = None


class TextConfig(_Body):
    format: TextFormat | None = None
    verbosity: str | None = None


class ReasoningConfig(_Body):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: str | None = None


class FunctionTool(_Body):
    """A tool as the request gives it: only `function` tools are run (others are refused by
    the route, naming their type)."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(min_length=1, max_length=100)
    name: str | None = Field(None, min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ResponsesRequest(HearthExtensions, _Body):
    model: _Model
    # a string (one user message) or a list of items (checked by responses.convert)
    input: str | Annotated[list[dict[str, Any]], Field(max_length=10000)] = Field(
        examples=["Say hello"]
    )
    instructions: str | None = None
    tools: list[FunctionTool] | None = Field(None, max_length=128)
    # "none" | "auto" | "required" | {"type": "function", "name"} | {"type": "allowed_tools", ...}
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1, le=1 << 24)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = Field(None, max_length=200)
    metadata: dict[str, str] | None = None
    user: str | None = None
    truncation: str | None = None
    # refused when set (no background jobs, no conversation objects, no stored prompts)
    background: bool | None = None
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
