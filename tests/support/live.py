"""Which tests start Hearth in another process: the `live` marker, applied by tests/conftest.py.

A test is live when it, a fixture it uses (directly or through other fixtures), or a helper
of the test tree they call, starts Hearth in a process of its own: `hearth serve` (the
`live_server` and `real_service` fixtures, `start_server`), a runner (`RunnerProcess`), an RPC
worker (`start_workers`), a private service (`hearth.launcher`), or any `python -m hearth ...`
command line run as a subprocess (the CLI may start a service of its own). The answer is read
from the code (names and constants of the functions involved), not from running it; a test the
reading misses can carry `@pytest.mark.live` itself.

The fast lane for development is `pytest -m "not slow and not live"`; CI runs everything.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]

# (qualified name, module the object must come from: exact name or, with a leading ".", suffix)
SPAWNERS = {
    ("start_server", ".fakes"),
    ("start_workers", "rpc_workers"),
    ("RunnerProcess", "hearth.server.scheduling.runner_process"),
    ("launch", "hearth.launcher"),
    ("start_private_service", "hearth.launcher"),
    ("PrivateService", "hearth.launcher"),
}
# Fixtures that start `hearth serve` without a function of the test tree naming it.
LIVE_FIXTURES = {"live_server", "real_service"}
# Names that run a subprocess (with "-m" and "hearth" among the constants: `python -m hearth`).
SUBPROCESS_CALLS = {"Popen", "run", "check_output", "check_call", "call"}


def _codes(code: CodeType) -> Iterator[CodeType]:
    """`code` and the code objects nested in it (inner functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _codes(const)


def _strings(consts: tuple[Any, ...]) -> Iterator[str]:
    """The string constants of a code object, those in folded tuples included."""
    for const in consts:
        if isinstance(const, str):
            yield const
        elif isinstance(const, tuple | frozenset):
            yield from _strings(tuple(const))


def _is_spawner(obj: Any) -> bool:
    name = getattr(obj, "__qualname__", None)
    module = getattr(obj, "__module__", None) or ""
    return any(name == qualname and _from(module, where) for qualname, where in SPAWNERS)


def _from(module: str, where: str) -> bool:
    return module.endswith(where) if where[0] == "." else module == where


def _may_hold_spawners(obj: Any) -> bool:
    """A module a spawner comes from (`launcher` in `launcher.launch(...)`)."""
    return inspect.ismodule(obj) and any(_from(obj.__name__, where) for _, where in SPAWNERS)


def _in_tests(obj: Any) -> bool:
    code = getattr(obj, "__code__", None)
    return code is not None and Path(code.co_filename).resolve().is_relative_to(TESTS)


class LiveReader:
    """Reads functions once each (fixtures and helpers are shared by many tests)."""

    def __init__(self) -> None:
        self._seen: dict[int, bool] = {}

    def spawns(self, func: Callable[..., Any]) -> bool:
        func = inspect.unwrap(func)
        key = id(func)
        if key not in self._seen:
            self._seen[key] = False  # a recursion reaching it again finds nothing new
            self._seen[key] = self._read(func)
        return self._seen[key]

    def _read(self, func: Callable[..., Any]) -> bool:
        code = getattr(func, "__code__", None)
        if code is None:
            return False
        scope = getattr(func, "__globals__", {})
        for part in _codes(code):
            if {"-m", "hearth"} <= set(_strings(part.co_consts)) and SUBPROCESS_CALLS & set(
                part.co_names
            ):
                return True
            # `launcher.launch(...)`: the attribute's name follows its module's in co_names
            modules = [m for n in part.co_names if _may_hold_spawners(m := scope.get(n))]
            for name in part.co_names:
                obj = scope.get(name)
                if obj is None:
                    obj = next((getattr(m, name) for m in modules if hasattr(m, name)), None)
                if obj is None:
                    continue
                if _is_spawner(obj):
                    return True
                if inspect.isfunction(obj) and _in_tests(obj) and self.spawns(obj):
                    return True
                if inspect.isclass(obj) and self._class_spawns(obj):
                    return True
        return False

    def _class_spawns(self, cls: type) -> bool:
        methods = [m for m in vars(cls).values() if inspect.isfunction(m) and _in_tests(m)]
        return any(self.spawns(m) for m in methods)

    def is_live(self, item: pytest.Item) -> bool:
        names = set(getattr(item, "fixturenames", ()))
        if names & LIVE_FIXTURES:
            return True
        test = getattr(item, "function", None)
        if test is not None and self.spawns(test):
            return True
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs if info is not None else {}
        return any(
            self.spawns(fixture.func)
            for name in names
            for fixture in defs.get(name, ())
            if _in_tests(fixture.func)
        )


def mark_live(items: list[pytest.Item]) -> None:
    """Add the `live` marker to every item that starts Hearth in another process."""
    reader = LiveReader()
    for item in items:
        if item.get_closest_marker("live") is None and reader.is_live(item):
            item.add_marker(pytest.mark.live)
