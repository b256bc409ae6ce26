"""Request bodies of the native (Ollama) API, as pydantic models.

They are the validation layer (a wrong type or range is a 400 with the field named) and the
OpenAPI spec the fuzz tests run against. Unknown fields are ignored, as Ollama does; the field
names and defaults are Ollama's. Responses are plain dicts built by the routes, so the
Ollama-compatible keys stay exactly as clients expect.

Every known field is either honoured or refused (400 with a sentence) when set to a value
Hearth cannot honour; a few are accepted and ignored because honouring them could not change
the answer. The ones that are not plainly honoured:

| field                                   | decision                                            |
|-----------------------------------------|-----------------------------------------------------|
| messages[].role                         | system, user, assistant or tool; others refused     |
| options.typical_p                       | refused unless 1 (off): the sampler has no typical  |
|                                         | sampling (also in /api/create `parameters`)         |
| options.num_gpu, main_gpu               | the layout search's: layers on GPUs / GPU first     |
| options.use_mmap, numa                  | ignored: loading hints; the answer is the same      |
| think: "low" / "medium" / "high" / "max"| thinking on, and the level reaches the template as  |
|                                         | `reasoning_effort` (templates that read it use it)  |
| tool_calls[].type, tools[].type,        | ignored: "function" is the only kind there is; the  |
| tool_calls[].function.index             | list's order is the calls' order                    |
| options on /api/embed(dings)            | only the runtime ones (num_ctx, ...) apply: there   |
|                                         | is no sampling in an embedding, as in Ollama        |
| pull `insecure`                         | honoured: allows a registry on plain http           |
| create `quantize`, `adapters`,          | refused by /api/create (create.py)                  |
| `modelfile`                             |                                                     |
| unknown fields, unknown option names    | ignored, as Ollama does (mirostat, tfs_z, ...)      |
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from ...request_types import (
    Body,
    ChatMessage,
    Options,
    refuse_unsampled,
)

__all__ = [
    "HearthExtensions",
    "GenerateRequest",
    "ChatRequest",
    "EmbedRequest",
    "EmbeddingsRequest",
    "ShowRequest",
    "CopyRequest",
    "DeleteRequest",
    "PullRequest",
    "CreateRequest",
    "ModelField",
    "KeepAlive",
    "Format",
]

_EXAMPLE_MODEL = "gemma3:270m"
ModelField = Annotated[
    str,
    Field(
        min_length=1,
        max_length=250,
        validation_alias=AliasChoices("model", "name"),
        examples=[_EXAMPLE_MODEL],
    ),
]
KeepAlive = float | str | None
Format = Literal["", "json"] | dict[str, Any] | None


class HearthExtensions(BaseModel):
    """What the /v1 APIs (OpenAI's, the Responses API, Anthropic's) take beyond their owners'
    fields: Ollama's `options` (sampling options the sampler lacks refused) and `keep_alive`."""

    options: Options | None = None  # Hearth / Ollama extension
    keep_alive: KeepAlive = None  # extension

    @field_validator("options")
    @classmethod
    def _sampled(cls, v: Options | None) -> Options | None:
        refuse_unsampled(v.model_dump(exclude_none=True) if v else None)
        return v


class FunctionSpec(Body):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(Body):
    model_config = ConfigDict(extra="allow")
    type: str = "function"
    function: FunctionSpec


class _Generation(Body):
    model: ModelField
    format: Format = None
    options: Options | None = None
    stream: bool = True
    keep_alive: KeepAlive = None
    think: bool | Literal["low", "medium", "high", "max"] | None = None
    logprobs: bool = False
    top_logprobs: int = Field(0, ge=0, le=20)
    truncate: bool = True
    shift: bool = True

    @field_validator("options")
    @classmethod
    def _sampled(cls, v: Options | None) -> Options | None:
        refuse_unsampled(v.model_dump(exclude_none=True) if v else None)
        return v


class GenerateRequest(_Generation):
    prompt: str = ""
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[Annotated[int, Field(ge=0, le=1 << 31)]] | None = Field(None, max_length=1 << 20)
    raw: bool = False
    images: list[str] | None = Field(None, max_length=16)


class ChatRequest(_Generation):
    messages: list[ChatMessage] = Field(default_factory=list, max_length=10000)
    tools: list[Tool] | None = Field(None, max_length=128)


class EmbedRequest(Body):
    model: ModelField
    input: str | list[str] = Field(default="", examples=["Why is the sky blue?"])
    truncate: bool = True
    dimensions: int | None = Field(None, ge=1, le=1 << 16)
    options: Options | None = None
    keep_alive: KeepAlive = None

    @field_validator("input")
    @classmethod
    def _not_too_many(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list) and len(v) > 2048:
            raise ValueError("at most 2048 inputs per request")
        return v


class EmbeddingsRequest(Body):
    model: ModelField
    prompt: str = ""
    options: Options | None = None
    keep_alive: KeepAlive = None


class ShowRequest(Body):
    model: ModelField
    verbose: bool = False


class CopyRequest(Body):
    source: str = Field(min_length=1, max_length=250, examples=[_EXAMPLE_MODEL])
    destination: str = Field(min_length=1, max_length=250, examples=["my-copy:latest"])


class DeleteRequest(Body):
    model: ModelField


class PullRequest(Body):
    model: ModelField
    insecure: bool = False
    stream: bool = True


class CreateRequest(Body):
    """Ollama's create request; `from` may also be an absolute path to a local .gguf file
    (Hearth extension), with `link` to hard-link (or symlink) it instead of copying, and
    `projector` the absolute path of its vision projector (`mmproj-*.gguf`). `files` may
    hold a model and a projector, as the ollama client sends them for two FROM lines, or a
    Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer files), which is
    converted to GGUF (`quantize`: f16 by default, f32, q8_0, q4_K_M); `from` may also be
    the absolute path of such a folder."""

    model: ModelField
    from_: str | None = Field(None, alias="from", max_length=4096)
    # A Hugging Face folder: config, tokenizer files and up to thousands of weight shards.
    files: dict[str, str] | None = Field(None, max_length=4096)
    adapters: dict[str, str] | None = None
    template: str | None = Field(None, max_length=1 << 20)
    system: str | None = Field(None, max_length=1 << 20)
    parameters: dict[str, Any] | None = None
    messages: list[ChatMessage] | None = None
    license: str | list[str] | None = None
    quantize: str | None = None
    modelfile: str | None = None
    stream: bool = True
    link: bool = False
    projector: str | None = Field(None, max_length=4096)  # Hearth: a local mmproj .gguf path

    @field_validator("parameters")
    @classmethod
    def _sampled(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        refuse_unsampled(v)
        return v
