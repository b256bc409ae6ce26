"""What a request asks of the service, in the vocabulary every API shares: the model options
(Ollama's names, validated) and chat messages with their tool calls.

The Ollama routes take these as their request bodies' fields (`api/ollama/schemas.py` re-exports
them; its docstring says which fields are honoured, ignored or refused), the OpenAI routes
convert into them (`api/openai/convert.py`), and the layers below the routes read them
(`service.py` merges options over a model's parameters, `prompting/prompts.py`
renders messages): so they live here, below the routes, not in the API package. Validation
is pydantic's: a wrong type or range is a 400 naming the field (`api/shared/errors.py`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from ..runner.protocol import CompletionOptions

__all__ = [
    "Body",
    "Options",
    "RUNTIME_OPTIONS",
    "refuse_unsampled",
    "Role",
    "ROLES",
    "FunctionCall",
    "ToolCall",
    "ChatMessage",
]

_I64 = 2**63 - 1


class Body(BaseModel):
    """A request body or part of one: unknown fields ignored (as Ollama does), no NaN."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, populate_by_name=True)


class Options(Body):
    """Ollama's `options`: sampling settings reach the runner, runtime ones pick the runner."""

    # runtime (choose or reload the runner)
    num_ctx: int | None = Field(None, ge=1, le=1 << 24)
    num_batch: int | None = Field(None, ge=1, le=1 << 16)
    num_thread: int | None = Field(None, ge=0, le=1024)
    num_gpu: int | None = Field(None, ge=-1, le=1 << 16)
    main_gpu: int | None = Field(None, ge=0, le=1024)
    use_mmap: bool | None = None
    numa: bool | None = None
    flash_attention: bool | None = None  # Hearth extension
    engine: Literal["auto", "hearth", "llamacpp"] | None = None  # Hearth: store/engines.py
    # Hearth extension (LM Studio's name): a model of the same vocabulary, by name, that
    # drafts tokens for speculative decoding, loaded in the same runner
    draft_model: str | None = Field(None, min_length=1, max_length=500)
    # sampling (passed to the runner)
    num_keep: int | None = Field(None, ge=-1, le=1 << 24)
    seed: int | None = Field(None, ge=-1, le=_I64)
    num_predict: int | None = Field(None, ge=-2, le=1 << 24)
    top_k: int | None = Field(None, ge=0, le=1 << 20)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    typical_p: float | None = Field(None, ge=0.0, le=1.0)
    repeat_last_n: int | None = Field(None, ge=-1, le=1 << 24)
    temperature: float | None = Field(None, ge=0.0, le=100.0)
    repeat_penalty: float | None = Field(None, ge=0.0, le=100.0)
    presence_penalty: float | None = Field(None, ge=-100.0, le=100.0)
    frequency_penalty: float | None = Field(None, ge=-100.0, le=100.0)
    stop: list[Annotated[str, Field(max_length=1000)]] | None = Field(None, max_length=64)
    # Hearth extension: speculative decoding (drafting; the output is the same either way).
    speculate: bool | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


# The options that choose (or reload) the runner: all but those a completion sends it
# (the runner protocol's CompletionOptions) and typical_p (a sampling option the sampler lacks:
# refused unless off, see refuse_unsampled).
RUNTIME_OPTIONS = frozenset(Options.model_fields) - CompletionOptions.names() - {"typical_p"}


def refuse_unsampled(options: dict[str, Any] | None) -> None:
    """Raise (a 400 naming the option) for a sampling option the sampler does not have, rather
    than let a generation quietly differ from what was asked."""
    typical = (options or {}).get("typical_p")
    if typical is not None and typical != 1:
        raise PydanticCustomError(
            "unsupported",
            "typical_p (locally typical sampling) is not supported; leave it out or set it "
            "to 1, and use top_p, top_k or min_p instead",
        )


Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = get_args(Role)


class FunctionCall(Body):
    name: str = Field(min_length=1, max_length=256)
    arguments: dict[str, Any] = Field(default_factory=dict)
    index: int | None = None


class ToolCall(Body):
    id: str | None = None
    type: str | None = "function"
    function: FunctionCall


class ChatMessage(Body):
    role: Role = Field(examples=["user"])
    content: str | None = ""
    thinking: str | None = None
    images: list[str] | None = Field(None, max_length=16)
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None

    @field_validator("role", mode="before")
    @classmethod
    def _known_role(cls, v: Any) -> Any:
        """A sentence naming the roles (before the enum's terser message); a template would
        otherwise render an unknown role as it likes, or drop the message."""
        if isinstance(v, str) and v not in ROLES:
            raise PydanticCustomError(
                "role",
                "'{role}' is not a message role; use system, user, assistant or tool",
                {"role": v[:40]},
            )
        return v
