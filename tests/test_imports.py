"""Which of Hearth's top-level packages may import which (parsed from the sources with ast,
imports inside functions included).

* engine: the inference engine; imports no other Hearth package (it defines the plugin
  contract in hearth.engine.architecture; the programs that assemble Hearth hand it the
  plugins' architectures).
* plugins: the plugin kit, built on the engine.
* server: the service; uses the engine (runner protocol, GGUF files) and the plugins (which
  architectures are installed).
* client: the CLI client; talks to the server, and assembles plugins and server pieces for the
  commands that run locally (import-ollama).
* ui: the desktop app; speaks HTTP only, never imports the engine, the server or the client.
* hearth.paths, hearth.default_model: leaf modules anyone may use.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "app"
LEAVES = {"paths", "default_model"}
PACKAGES = {"engine", "plugins", "server", "client", "ui"}
ALLOWED: dict[str, set[str]] = {
    "engine": set(),
    "plugins": {"engine"},
    "server": {"engine", "plugins"},
    "client": {"engine", "plugins", "server"},
    "ui": set(),
    "paths": set(),
    "default_model": {"paths"},
}
# Imports that break the rules and could not be fixed yet: (file, imported module) -> why.
KNOWN_VIOLATIONS = {
    ("engine/model.py", "hearth.plugins.registry"): (
        "default_registry() builds the plugins' registry for callers that pass none: "
        "hearth.engine.runner.core.Runner (load_model) and hearth.server.app.create_app; "
        "it goes once the runner's main and the service pass the registry in"
    ),
}


def _module_name(path: Path) -> list[str]:
    parts = ["hearth", *path.relative_to(APP).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, relative imports resolved to absolute names."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module:
                found.add(node.module)
    return found


def _owner(module: str) -> str | None:
    """The top-level part of Hearth a module belongs to (None outside those checked)."""
    parts = module.split(".")
    if parts[0] != "hearth" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in PACKAGES | LEAVES else None


def violations() -> dict[tuple[str, str], str]:
    found = {}
    for path in sorted(APP.rglob("*.py")):
        source = _owner(".".join(_module_name(path)))
        if source is None:
            continue  # hearth/__init__, cli, __main__, terminal_chat: the programs
        allowed = ALLOWED[source] | ({source} if source in LEAVES else LEAVES | {source})
        for module in _imports(path):
            target = _owner(module)
            if target is not None and target not in allowed:
                found[(path.relative_to(APP).as_posix(), module)] = f"{source} -> {target}"
    return found


def test_packages_import_only_in_the_allowed_directions():
    new = {k: v for k, v in violations().items() if k not in KNOWN_VIOLATIONS}
    assert new == {}, "imports against the rules in tests/test_imports.py"


@pytest.mark.xfail(strict=True, reason="; ".join(KNOWN_VIOLATIONS.values()))
def test_no_known_violations_are_left():
    assert [k for k in KNOWN_VIOLATIONS if k in violations()] == []


def test_every_known_violation_still_exists():
    """Fixing one must also remove it from KNOWN_VIOLATIONS (so it cannot come back)."""
    assert set(KNOWN_VIOLATIONS) <= set(violations())


def test_the_check_sees_relative_and_function_level_imports(tmp_path, monkeypatch):
    fake = tmp_path / "app"
    (fake / "ui").mkdir(parents=True)
    (fake / "ui" / "view.py").write_text(
        "from ..paths import data_dir\n\ndef f():\n    from ..engine import model\n"
    )
    (fake / "engine").mkdir()
    (fake / "engine" / "x.py").write_text("import hearth.server.app\n")
    monkeypatch.setitem(globals(), "APP", fake)
    assert violations() == {
        ("ui/view.py", "hearth.engine"): "ui -> engine",
        ("engine/x.py", "hearth.server.app"): "engine -> server",
    }
