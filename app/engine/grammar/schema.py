"""JSON Schema -> grammar nodes that the automaton (`automaton.py`) runs.

Supported subset (everything else raises `ValueError` naming the keyword):

- `type`: string, number, integer, boolean, null, object, array, or a list of these;
  `nullable: true` (OpenAPI) adds null.
- `enum` / `const` (any JSON values; the model must write them in compact canonical form,
  e.g. `"é"` raw rather than `"\\u00e9"`), optionally with `type`.
- objects: `properties`, `required` (names listed in `properties`), `additionalProperties`
  (bool or schema; default false when `properties` is given, true otherwise). No duplicate
  listed keys; `}` only once every required key was written.
- arrays: `items` (one schema), `minItems`, `maxItems` (`uniqueItems: false` is accepted).
- strings: `minLength`, `maxLength` (in code points; `\\uXXXX` surrogate escapes are refused so
  that a count of escapes is a count of code points).
- `anyOf`; `oneOf` when the alternatives cannot both match (different JSON types, disjoint
  enums, or objects told apart by a required `const`/`enum` property); `allOf` with one entry.
- `$ref` to `#`, `#/$defs/...` or `#/definitions/...` (recursion allowed through containers).
- Ignored annotations: title, description, default, examples, format, $schema, $id, ...
  (`format` is an annotation in JSON Schema 2020-12; it is not enforced).
"""

from __future__ import annotations

import json
from typing import Any

from .nodes import (
    AnyNode,
    ArrNode,
    Limits,
    LitNode,
    Node,
    NumNode,
    ObjNode,
    RefNode,
    StrNode,
    UnionNode,
)

__all__ = ["compile_schema", "schema_from_format"]

# Keywords that do not constrain a value (format: an annotation in JSON Schema 2020-12).
_ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "example", "format", "$schema", "$id",
    "$comment", "$anchor", "readOnly", "writeOnly", "deprecated", "contentMediaType",
    "contentEncoding", "discriminator", "$defs", "definitions", "strict",
})  # fmt: skip
_SUPPORTED = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "minItems", "maxItems", "minLength", "maxLength", "anyOf", "oneOf", "allOf", "$ref",
    "nullable",
})  # fmt: skip
_TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")
_TYPE_KEYS = {
    "object": {"properties", "required", "additionalProperties"},
    "array": {"items", "minItems", "maxItems"},
    "string": {"minLength", "maxLength"},
}


def _canon(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


class _Compiler:
    def __init__(self, root: dict[str, Any], lim: Limits) -> None:
        self.root, self.lim = root, lim
        self.any = AnyNode(lim)
        self.refs: dict[str, RefNode] = {}

    def fail(self, path: str, msg: str) -> ValueError:
        return ValueError(f"unsupported JSON schema at {path}: {msg}")

    def node(self, s: Any, path: str) -> Node:
        if s is True:
            return self.any
        if not isinstance(s, dict):
            raise self.fail(path, f"a schema must be an object or true, not {s!r}")
        keys = set(s) - _ANNOTATIONS
        if s.get("uniqueItems") is False:
            keys.discard("uniqueItems")  # no constraint
        unknown = keys - _SUPPORTED
        if unknown:
            raise self.fail(path, f"keyword(s) {', '.join(sorted(unknown))} not supported")
        if "$ref" in s:
            if keys != {"$ref"}:
                raise self.fail(path, "$ref next to other keywords")
            return self.ref(s["$ref"], path)
        for word in ("anyOf", "oneOf", "allOf"):
            if word in s:
                if keys - {word}:
                    raise self.fail(path, f"{word} next to other keywords")
                return self.combine(word, s[word], f"{path}/{word}")
        if "enum" in s or "const" in s:
            return self.literal(s, keys, path)
        types = s.get("type")
        if types is None:
            present = [t for t, ks in _TYPE_KEYS.items() if ks & keys]
            if len(present) > 1:
                raise self.fail(path, "keywords of several types without a `type`")
            types = present or None
        elif isinstance(types, str):
            types = [types]
        if types is None:
            base: Node = self.any
        else:
            if not isinstance(types, list) or not types or any(t not in _TYPES for t in types):
                raise self.fail(path, f"bad type {s.get('type')!r}")
            alts = tuple(self.typed(t, s, path) for t in dict.fromkeys(types))
            base = alts[0] if len(alts) == 1 else UnionNode(alts)
        if s.get("nullable") is True:
            base = UnionNode((base, self.typed("null", {}, path)))
        return base

    def typed(self, t: str, s: dict[str, Any], path: str) -> Node:
        lim = self.lim
        if t == "string":
            mn, mx = self.count(s, "minLength", 0, path), self.count(s, "maxLength", None, path)
            mx = lim.max_string_chars if mx is None else mx
            if mn > mx:
                raise self.fail(path, "minLength is larger than maxLength")
            return StrNode(mn, mx)
        if t in ("number", "integer"):
            return NumNode(t == "integer", lim.max_number_chars)
        if t == "boolean":
            return LitNode([b"true", b"false"], [True, False])
        if t == "null":
            return LitNode([b"null"], [None])
        if t == "array":
            items = s.get("items", True)
            if isinstance(items, list):
                raise self.fail(path, "tuple-form `items` (a list) is not supported")
            mn, mx = self.count(s, "minItems", 0, path), self.count(s, "maxItems", None, path)
            if mx is not None and mn > mx:
                raise self.fail(path, "minItems is larger than maxItems")
            return ArrNode(self.node(items, f"{path}/items"), mn, mx, lim)
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise self.fail(path, "properties must be an object")
        required = s.get("required", [])
        if not isinstance(required, list) or any(r not in props for r in required):
            raise self.fail(path, f"required {required!r} must name listed properties")
        extra = s.get("additionalProperties", not props)
        additional: Node | None
        if extra is False:
            additional = None
        elif extra is True:
            additional = self.any
        else:
            additional = self.node(extra, f"{path}/additionalProperties")
        compiled = tuple(
            (name, self.node(sub, f"{path}/properties/{name}")) for name, sub in props.items()
        )
        req = sum(1 << i for i, name in enumerate(props) if name in required)
        return ObjNode(compiled, req, additional, lim)

    def count(self, s: dict[str, Any], key: str, default: int | None, path: str) -> Any:
        v = s.get(key, default)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise self.fail(path, f"{key} must be a non-negative integer")
        return v

    def literal(self, s: dict[str, Any], keys: set[str], path: str) -> Node:
        if keys - {"enum", "const", "type"}:
            raise self.fail(path, "enum/const next to other validation keywords")
        values = [s["const"]] if "const" in s else s["enum"]
        if not isinstance(values, list) or not values:
            raise self.fail(path, "enum must be a non-empty list")
        types = s.get("type")
        if types is not None:
            allowed = {types} if isinstance(types, str) else set(types)
            if "number" in allowed:
                allowed.add("integer")
            values = [v for v in values if _json_type(v) in allowed]
            if not values:
                raise self.fail(path, "no enum value has the given type")
        texts = list(dict.fromkeys(_canon(v) for v in values))
        return LitNode(texts, values)

    def combine(self, word: str, subs: Any, path: str) -> Node:
        if not isinstance(subs, list) or not subs:
            raise self.fail(path, f"{word} must be a non-empty list")
        if word == "allOf":
            if len(subs) != 1:
                raise self.fail(path, "allOf with more than one schema is not supported")
            return self.node(subs[0], f"{path}/0")
        alts = tuple(self.node(sub, f"{path}/{i}") for i, sub in enumerate(subs))
        if word == "oneOf":
            problem = _overlap(alts)
            if problem:
                raise self.fail(path, f"oneOf alternatives may overlap ({problem}); use anyOf")
        return alts[0] if len(alts) == 1 else UnionNode(alts)

    def ref(self, ref: Any, path: str) -> Node:
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise self.fail(path, f"only local $ref ('#/...') is supported, not {ref!r}")
        node = self.refs.get(ref)
        if node is None:  # compiled once; a reference back to it while compiling recurses
            node = self.refs[ref] = RefNode()
            target: Any = self.root
            for part in ref[2:].split("/") if ref != "#" else []:
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, dict) or part not in target:
                    raise self.fail(path, f"$ref {ref} does not resolve")
                target = target[part]
            node.target = self.node(target, ref)
        return node

    def check_cycles(self) -> None:
        """Refuse a $ref that reaches itself through anyOf/oneOf/$ref alone: starting a value
        of it would never end. (Through an object or array it is fine: each level costs
        output.)"""
        for name, ref in self.refs.items():
            todo: list[Node | None] = [ref.target]
            seen: set[int] = set()
            while todo:
                n = todo.pop()
                if n is ref:
                    raise self.fail(name, f"$ref {name} refers to itself without an object/array")
                if n is None or id(n) in seen:
                    continue
                seen.add(id(n))
                if isinstance(n, RefNode):
                    todo.append(n.target)
                elif isinstance(n, UnionNode):
                    todo.extend(n.alts)


def _deref(node: Node) -> Node | None:
    while isinstance(node, RefNode):
        if node.target is None:
            return None  # still compiling (recursive): unknown
        node = node.target
    return node


def _types(node: Node) -> set[str]:
    """The JSON types `node` may produce (integer counts as number)."""
    n = _deref(node)
    if n is None or isinstance(n, AnyNode):
        return {"object", "array", "string", "number", "boolean", "null"}
    if isinstance(n, UnionNode):
        return set().union(*(_types(a) for a in n.alts))
    if isinstance(n, LitNode):
        return {_json_type(v).replace("integer", "number") for v in n.values}
    if isinstance(n, ObjNode):
        return {"object"}
    if isinstance(n, ArrNode):
        return {"array"}
    return {"string"} if isinstance(n, StrNode) else {"number"}


def _norm(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    return v


def _lit_set(node: Node) -> set[bytes] | None:
    n = _deref(node)
    return {_canon(_norm(v)) for v in n.values} if isinstance(n, LitNode) else None


def _told_apart(a: ObjNode, b: ObjNode) -> bool:
    """A required property that is a literal in both, with no value in common."""
    for name, i in a.index.items():
        j = b.index.get(name)
        if j is None or not (a.req >> i & 1 and b.req >> j & 1):
            continue
        la, lb = _lit_set(a.props[i][1]), _lit_set(b.props[j][1])
        if la is not None and lb is not None and not la & lb:
            return True
    return False


def _overlap(alts: tuple[Node, ...]) -> str:
    """Why two oneOf alternatives might both match a value ("" when they cannot)."""
    for i, a in enumerate(alts):
        for j in range(i + 1, len(alts)):
            b = alts[j]
            common = _types(a) & _types(b)
            if not common:
                continue
            la, lb = _lit_set(a), _lit_set(b)
            if la is not None and lb is not None and not la & lb:
                continue
            da, db = _deref(a), _deref(b)
            if isinstance(da, ObjNode) and isinstance(db, ObjNode) and _told_apart(da, db):
                continue
            return f"#{i} and #{j} both accept {'/'.join(sorted(common))}"
    return ""


def compile_schema(schema: dict[str, Any] | None, limits: Limits | None = None) -> Node:
    """Compile `schema` (None: any JSON object) into the root grammar node."""
    lim = limits or Limits()
    if schema is None:
        return AnyNode(lim).obj
    if not isinstance(schema, dict):
        raise ValueError(f"a JSON schema must be an object, not {type(schema).__name__}")
    compiler = _Compiler(schema, lim)
    root = compiler.node(schema, "#")
    compiler.check_cycles()
    return root


def schema_from_format(fmt: Any) -> dict[str, Any] | None:
    """The schema a request's `format` / `response_format` asks for.

    `"json"` (Ollama) and `{"type": "json_object"}` (OpenAI) -> None (any JSON object);
    `{"type": "json_schema", "json_schema": {"schema": {...}}}` (OpenAI) -> that schema;
    any other dict is taken as the JSON Schema itself (Ollama). Anything else: `ValueError`.
    """
    if fmt == "json":
        return None
    if not isinstance(fmt, dict):
        raise ValueError(f'format must be "json" or a JSON schema object, not {fmt!r}')
    kind = fmt.get("type")
    if kind == "json_object":
        return None
    if kind == "json_schema":
        inner = fmt.get("json_schema")
        schema = inner.get("schema") if isinstance(inner, dict) else None
        if not isinstance(schema, dict):
            raise ValueError('response_format "json_schema" needs json_schema.schema (an object)')
        return schema
    if kind == "text":
        raise ValueError('response_format "text" asks for no JSON constraint')
    return fmt
