"""Elicitation: a server asks the user for something while one of its tools runs (MCP's
`elicitation/create`, or on a 2026-07-28 connection an input request inside its result).

Qt-free, so the window's form and the terminal's questions share the meaning of a request:
`Elicitation` is what the hub hands a front end (the server, its message, the form's `fields`
built from the requested JSON schema, or the `url` of a URL-mode request), and `ElicitAnswer`
what it gives back (accept with the values, decline, or cancel). `check_values` turns the
values a form or a terminal collected (text typed, a box ticked) into the content MCP sends,
or raises `ValueError` with a sentence naming the field.

The schema MCP allows is flat: an object whose properties are strings (with `format` email,
uri, date or date-time, `minLength`/`maxLength`), numbers or integers (`minimum`/`maximum`),
booleans, single-choice enums (`enum`, or `oneOf` with `const`/`title`) and multi-choice ones
(an array whose `items` are such an enum).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "ElicitAnswer",
    "Elicitation",
    "FormField",
    "check_values",
    "parse_schema",
]

Kind = Literal["string", "number", "integer", "boolean", "choice", "choices"]
Action = Literal["accept", "decline", "cancel"]


@dataclass(frozen=True)
class FormField:
    """One property of the requested schema. `options` are (value, label) pairs of a choice."""

    name: str
    kind: Kind
    title: str = ""
    description: str = ""
    required: bool = False
    default: Any = None
    options: tuple[tuple[str, str], ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    format: str = ""

    @property
    def label(self) -> str:
        return self.title or self.name


@dataclass
class Elicitation:
    """A server's question: `message`, and either `fields` (form mode) or `url` (URL mode: the
    user opens the address and says whether they did). `cancelled` is set when the call that
    asked ended meanwhile (the user stopped it): a front end then closes its form."""

    server: str
    message: str
    fields: list[FormField] = field(default_factory=list)
    url: str = ""
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class ElicitAnswer:
    """The user's answer: "accept" with `content` (field name to value), "decline" (said no)
    or "cancel" (dismissed the question)."""

    action: Action
    content: dict[str, Any] = field(default_factory=dict)


def _options(prop: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    if isinstance(prop.get("enum"), list):
        names = prop.get("enumNames")
        labels = names if isinstance(names, list) and len(names) == len(prop["enum"]) else None
        return tuple(
            (str(v), str(labels[i]) if labels else str(v)) for i, v in enumerate(prop["enum"])
        )
    for key in ("oneOf", "anyOf"):
        if isinstance(prop.get(key), list):
            return tuple(
                (str(o["const"]), str(o.get("title") or o["const"]))
                for o in prop[key]
                if isinstance(o, Mapping) and "const" in o
            )
    return ()


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def parse_schema(schema: Mapping[str, Any] | None) -> list[FormField]:
    """The fields of a requested schema, in its order. A property of a kind MCP does not allow
    is refused with `ValueError` (the request is then declined, saying why)."""
    props = (schema or {}).get("properties") or {}
    if not isinstance(props, Mapping):
        raise ValueError("the server's form has no properties object")
    required = set((schema or {}).get("required") or ())
    out = []
    for name, prop in props.items():
        if not isinstance(prop, Mapping):
            raise ValueError(f"the server's form field '{name}' is not a schema")
        kind: Kind
        options = _options(prop)
        items = prop.get("items")
        if prop.get("type") == "array" and isinstance(items, Mapping) and _options(items):
            kind, options = "choices", _options(items)
        elif options:
            kind = "choice"
        elif prop.get("type") in ("string", "number", "integer", "boolean"):
            kind = prop["type"]
        else:
            raise ValueError(
                f"the server's form field '{name}' is of a kind Hearth cannot show "
                f"({prop.get('type')!r}; MCP allows strings, numbers, booleans and choices)"
            )
        out.append(
            FormField(
                name=str(name),
                kind=kind,
                title=str(prop.get("title") or ""),
                description=str(prop.get("description") or ""),
                required=name in required,
                default=prop.get("default"),
                options=options,
                minimum=_number(prop.get("minimum")),
                maximum=_number(prop.get("maximum")),
                min_length=prop.get("minLength")
                if isinstance(prop.get("minLength"), int)
                else None,
                max_length=prop.get("maxLength")
                if isinstance(prop.get("maxLength"), int)
                else None,
                format=str(prop.get("format") or ""),
            )
        )
    return out


_TRUE = {"y", "yes", "true", "1", "on"}
_FALSE = {"n", "no", "false", "0", "off"}


def _value(f: FormField, raw: Any) -> Any:
    """One field's value from what a front end collected (text, a bool, a list of values)."""
    if f.kind == "boolean":
        if isinstance(raw, bool):
            return raw
        word = str(raw).strip().lower()
        if word in _TRUE | _FALSE:
            return word in _TRUE
        raise ValueError(f"'{f.label}' must be yes or no")
    if f.kind in ("number", "integer"):
        try:
            num: float | int = int(str(raw).strip()) if f.kind == "integer" else float(raw)
        except ValueError:
            what = "a whole number" if f.kind == "integer" else "a number"
            raise ValueError(f"'{f.label}' must be {what}") from None
        if f.minimum is not None and num < f.minimum:
            raise ValueError(f"'{f.label}' must be at least {f.minimum:g}")
        if f.maximum is not None and num > f.maximum:
            raise ValueError(f"'{f.label}' must be at most {f.maximum:g}")
        return num
    values = [v for v, _label in f.options]
    if f.kind == "choices":
        picked = raw if isinstance(raw, list) else [p.strip() for p in str(raw).split(",")]
        picked = [p for p in picked if p]
        wrong = [p for p in picked if p not in values]
        if wrong:
            raise ValueError(f"'{f.label}' has no choice {wrong[0]!r} (choose from {values})")
        return picked
    text = str(raw)
    if f.kind == "choice":
        if text not in values:
            raise ValueError(f"'{f.label}' must be one of {values}")
        return text
    if f.min_length is not None and len(text) < f.min_length:
        raise ValueError(f"'{f.label}' needs at least {f.min_length} characters")
    if f.max_length is not None and len(text) > f.max_length:
        raise ValueError(f"'{f.label}' takes at most {f.max_length} characters")
    return text


def check_values(fields: list[FormField], raw: Mapping[str, Any]) -> dict[str, Any]:
    """The content to send for the values collected (`raw`: field name to what the user gave;
    an empty string or a missing name is "not given"). Raises `ValueError` with a sentence for
    a required field left empty or a value the field does not take."""
    out: dict[str, Any] = {}
    for f in fields:
        given = raw.get(f.name)
        if given is None or given == "" or given == []:
            if f.required:
                raise ValueError(f"'{f.label}' is required")
            continue
        out[f.name] = _value(f, given)
    return out
