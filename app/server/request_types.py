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

from collections.abc import Mapping
from dataclasses import Field as DataclassField
from dataclasses import fields
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator
from pydantic_core import PydanticCustomError

from ..options import GenerationOptions, LoadOptions

__all__ = [
    "Body",
    "Options",
    "RUNTIME_OPTIONS",
    "layered_options",
    "refuse_unsampled",
    "Role",
    "ROLES",
    "FunctionCall",
    "ToolCall",
    "ChatMessage",
]


class Body(BaseModel):
    """A request body or part of one: unknown fields ignored (as Ollama does), no NaN."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, populate_by_name=True)


def _request_field(f: DataclassField[Any], hint: Any) -> tuple[Any, Any]:
    """A pydantic field for option `f` (hearth.options): None unless given, its range, its
    length, and for a list, the number of items and each item's length."""
    meta = f.metadata
    low, high = meta.get("low"), meta.get("high")
    least, most = meta.get("length") or (None, None)
    if get_origin(hint) is list:  # stop: up to `items` strings of up to `most` characters
        return list[Annotated[str, Field(max_length=most)]] | None, Field(
            None, max_length=meta["items"]
        )
    bounds = Field(
        None, ge=low, le=high, min_length=least, max_length=most, description=meta["help"]
    )
    return (hint if type(None) in get_args(hint) else hint | None), bounds


def _one_stop(v: Any) -> Any:
    return [v] if isinstance(v, str) else v


_FIELDS: dict[str, Any] = {
    f.name: _request_field(f, hints[f.name])
    for record in (LoadOptions, GenerationOptions)
    if (hints := get_type_hints(record))
    for f in fields(record)
}
# refused unless off (refuse_unsampled): a sampling option the sampler lacks
_FIELDS["typical_p"] = (float | None, Field(None, ge=0.0, le=1.0))
_DECLARED: Any = create_model(
    "Options",
    __base__=Body,
    __module__=__name__,
    __validators__={"_one_stop": field_validator("stop", mode="before")(_one_stop)},
    **_FIELDS,
)


class Options(_DECLARED):  # type: ignore[misc]  # its fields are hearth.options' records'
    """Ollama's `options`: sampling settings reach the runner, runtime ones pick the runner.
    Its fields are those of hearth.options' two records (their ranges and lengths checked
    here), and typical_p (refused unless off)."""


# The options that choose (or reload) the runner: all but those a completion sends it
# (GenerationOptions) and typical_p (a sampling option the sampler lacks: refused unless off,
# see refuse_unsampled).
RUNTIME_OPTIONS = LoadOptions.names()


def layered_options(
    options: Options | None, fields: Mapping[str, Any], defaults: Mapping[str, Any]
) -> Options:
    """The options of a request to an API with its own sampling fields (OpenAI's, Anthropic's),
    by one rule for every such route: a field the request sends (`fields`, Ollama's names; None:
    not sent) wins; then the same option in the body's Hearth `options`; then the API's own
    default (`defaults`: OpenAI's temperature 1, ...). An option none of them sets is left to
    the model's parameters and the declared defaults (the service merges those)."""
    given = options.model_dump(exclude_none=True) if options is not None else {}
    sent = {name: value for name, value in fields.items() if value is not None}
    layered: Options = Options.model_validate({**defaults, **given, **sent})
    return layered


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
