"""The records as JSON (`to_wire`) and back, checked (`from_wire`): a field the record does
not have, a missing field or a value of the wrong type is a `ProtocolError` whose sentence
names it (`options.temperature`). `field_types` gives a record's resolved field types (also
read by `RunnerOptions.add_arguments`). Part of the runner protocol (see
`hearth.runner.protocol`); it knows no record of its own.
"""

from __future__ import annotations

import contextlib
import types
from dataclasses import MISSING, fields, is_dataclass
from enum import Enum
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

__all__ = ["ProtocolError", "field_types", "from_wire", "to_wire"]


class ProtocolError(ValueError):
    """A message that breaks this protocol: an unknown field, or a value of the wrong type.
    The sentence names the field (`options.temperature`)."""


T = TypeVar("T")


def to_wire(obj: Any) -> Any:
    """A protocol record as JSON data: fields that are None are left out; nested records and
    lists of them are converted too; enums become their values."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: to_wire(value)
            for f in fields(obj)
            if (value := getattr(obj, f.name)) is not None
        }
    if isinstance(obj, list | tuple):
        return [to_wire(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_wire(v) for k, v in obj.items()}
    if isinstance(obj, Enum):
        return obj.value
    return obj


def from_wire(cls: type[T], data: Any, where: str = "") -> T:
    """A protocol record from JSON data, checked: an unknown field or a value of the wrong
    type is a ProtocolError naming it (`where` prefixes the names, for nested records)."""
    label = where or cls.__name__
    if not isinstance(data, dict):
        raise ProtocolError(f"{label} must be a JSON object, not {_shown(data)}")
    hints = field_types(cls)
    unknown = sorted(set(data) - hints.keys())
    if unknown:
        raise ProtocolError(
            f"unknown field {_path(where, unknown[0])!r} in {cls.__name__} "
            f"(its fields: {', '.join(hints)})"
        )
    missing = [
        _path(where, f.name)
        for f in fields(cls)  # type: ignore[arg-type]
        if f.default is MISSING and f.default_factory is MISSING and f.name not in data
    ]
    if missing:
        raise ProtocolError(f"{cls.__name__} lacks {', '.join(missing)}")
    values = {name: _value(value, hints[name], _path(where, name)) for name, value in data.items()}
    return cls(**values)


_FIELD_TYPES: dict[type, dict[str, Any]] = {}


def field_types(cls: type) -> dict[str, Any]:
    """A record's field types, resolved (once per record)."""
    if cls not in _FIELD_TYPES:
        names = {f.name for f in fields(cls)}
        _FIELD_TYPES[cls] = {k: v for k, v in get_type_hints(cls).items() if k in names}
    return _FIELD_TYPES[cls]


def _path(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _value(value: Any, hint: Any, where: str) -> Any:
    """`value` checked against the type `hint` (and converted: a record, an enum, a float)."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [h for h in get_args(hint) if h is not type(None)]
        if value is None and len(options) < len(get_args(hint)):
            return None
        if len(options) == 1:  # `X | None`: the error X's check gives is the more precise
            return _value(value, options[0], where)
        for option in options:
            with contextlib.suppress(ProtocolError):
                return _value(value, option, where)
        raise ProtocolError(f"{where} must be {_described(hint)}, not {_shown(value)}")
    if hint is Any:
        return value
    if isinstance(hint, type) and is_dataclass(hint):
        return from_wire(hint, value, where)
    if isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(value)
        except ValueError:
            raise ProtocolError(
                f"{where} must be one of {', '.join(str(m.value) for m in hint)}, "
                f"not {_shown(value)}"
            ) from None
    if origin is list:
        if not isinstance(value, list):
            raise ProtocolError(f"{where} must be {_described(hint)}, not {_shown(value)}")
        (item,) = get_args(hint)
        return [_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ProtocolError(f"{where} must be {_described(hint)}, not {_shown(value)}")
        _, item = get_args(hint)
        return {k: _value(v, item, _path(where, k)) for k, v in value.items()}
    plain = hint in (int, float) and isinstance(value, bool)  # JSON's true is not a number
    wanted = (int, float) if hint is float else hint
    if plain or not isinstance(value, wanted):
        raise ProtocolError(f"{where} must be {_described(hint)}, not {_shown(value)}")
    return float(value) if hint is float else value


def _described(hint: Any) -> str:
    """A type as the sentence of an error says it ("a number or null")."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_described(h) for h in get_args(hint))
    if origin is list:
        return f"a list of {_described(get_args(hint)[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin is dict:
        return "a JSON object"
    if isinstance(hint, type) and is_dataclass(hint):
        return "a JSON object"
    names = {type(None): "null", bool: "true or false", int: "an integer", float: "a number",
             str: "a string", Any: "any value"}  # fmt: skip
    return names.get(hint, getattr(hint, "__name__", str(hint)))
