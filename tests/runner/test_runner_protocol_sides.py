"""Every type of the runner protocol (hearth.runner.protocol) is used by both of its sides: the
runner that writes it (app/runner/) and the service that reads it (app/server/). A type only one
side knows is a contract nobody keeps (as CompletionChunk once was: defined, never used).

"Used" is read from the sources with ast: the type's name appears in an expression or an
annotation (an import alone does not count), or the type is a record nested in one that side
uses (the parent's `from_wire` / `to_wire` reads and writes it: CompletionOptions inside
CompletionRequest, TokenLogprob inside CompletionChunk, RunnerMemory inside RunnerInfo)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from pathlib import Path

import hearth.runner.protocol as protocol

from support.paths import APP

PROTOCOL = APP / "runner" / "protocol"


def protocol_types() -> dict[str, type]:
    """The public classes the protocol package itself defines (KVCacheType is the engine's,
    re-exported)."""
    return {
        name: obj
        for name in protocol.__all__
        if inspect.isclass(obj := getattr(protocol, name))
        and obj.__module__.startswith(protocol.__name__ + ".")
    }


def names_used(folder: Path) -> set[str]:
    """Names and attribute names in the expressions and annotations of folder's modules (not
    in their import statements), the protocol package left out."""
    found: set[str] = set()
    for path in folder.rglob("*.py"):
        if path.is_relative_to(PROTOCOL):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name):
                found.add(node.id)
            elif isinstance(node, ast.Attribute):
                found.add(node.attr)
    return found


def nested(cls: type) -> set[type]:
    """The protocol records reachable through `cls`'s fields (lists and unions included)."""
    records = set(protocol_types().values())
    out: set[type] = set()
    if dataclasses.is_dataclass(cls):
        for hint in typing.get_type_hints(cls).values():
            for t in _types_in(hint):
                if t in records and t is not cls and t not in out:
                    out |= {t} | nested(t)
    return out


def _types_in(hint: object) -> list[object]:
    return [hint, *(t for arg in typing.get_args(hint) for t in _types_in(arg))]


def used_by(folder: Path) -> set[str]:
    types = protocol_types()
    named = {name for name in types if name in names_used(folder)}
    reached = {t.__name__ for name in named for t in nested(types[name])}
    return named | reached


def test_the_protocol_defines_the_records_it_promises():
    assert {
        "CompletionRequest",
        "CompletionOptions",
        "CompletionChunk",
        "TokenLogprob",
        "CompletionDone",
        "CompletionError",
        "RunnerInfo",
        "RunnerMemory",
        "RunnerOptions",
        "EngineKind",
    } <= set(protocol_types())


def test_every_protocol_type_is_used_by_the_runner_and_by_the_service():
    types = set(protocol_types())
    runner, service = used_by(APP / "runner"), used_by(APP / "server")
    missing = {
        name: [
            side for side, used in (("runner", runner), ("service", service)) if name not in used
        ]
        for name in sorted(types)
    }
    assert {k: v for k, v in missing.items() if v} == {}, "protocol types one side never uses"


def test_the_check_sees_a_type_only_one_side_uses(tmp_path):
    """The check can fail: a module naming a type on one side only is one side only."""
    (tmp_path / "only.py").write_text("x: CompletionDone\n")
    assert "CompletionDone" in used_by(tmp_path)
    assert "RunnerInfo" not in used_by(tmp_path)
    (tmp_path / "imports.py").write_text("from hearth.runner.protocol import RunnerInfo\n")
    assert "RunnerInfo" not in used_by(tmp_path)  # an import alone is no use
    (tmp_path / "reads.py").write_text("def f(line): return from_wire(CompletionChunk, line)\n")
    assert {"CompletionChunk", "TokenLogprob"} <= used_by(tmp_path)  # nested in a chunk
