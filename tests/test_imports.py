"""Which of Hearth's top-level parts may import which (parsed from the sources with ast,
imports inside functions included). There are no exceptions.

Libraries:
* engine: the inference engine; imports no other Hearth package (it defines the plugin
  contract in hearth.engine.architecture; the programs that assemble Hearth hand it the
  plugins' architectures).
* llamacpp: llama.cpp as a second engine (llama-cpp-python) for files no plugin registers,
  with the engine's passes over its own library; engine (the passes' types, the KV-cache
  errors, the tokenizer contract). Only the runner uses it: a process holds Hearth's ggml or
  llama.cpp's, never both.
* plugins: the plugin kit and the registry of installed plugins, built on the engine.
* convert: Hugging Face checkpoint folders -> GGUF (the driver; plugins' converters); engine
  + plugins.
* history, app_settings: the desktop app's chat history and settings (Qt-free).
* agent: MCP servers (tools) and the agent loop (Qt-free, HTTP-free); for the CLI and the app.
* documents: reading, indexing and retrieving attached documents (Qt-free); history, whose
  database holds them. The desktop app and the CLI use it.
* client: the one client of the service's HTTP API (Qt-free; auth, JSON, NDJSON streams,
  cancellation, error sentences); imports nothing of Hearth. documents, the launcher, the CLI
  and the desktop app speak to the service through it.
* launcher: starts or finds a `hearth serve` (for the CLI and the desktop app); no server code.
* hearth.paths, hearth.default_model, hearth.hostport, hearth.program (the desktop id, the
  command that runs `hearth` again, frozen or not), hearth.desktop (the menu entry and icons),
  hearth.options (every model option, declared once with its default): leaf modules anyone
  may use.

Programs (each a process, or the command that starts one):
* runner: the runner process (one model); engine + plugins + llamacpp.
* server: the service; engine + plugins + convert + the runner's wire protocol
  (hearth.runner.protocol).
* cli: the `hearth` command; starts the others, talks to the service over HTTP; `hearth chats`
  exports and imports the chat history (history), as the desktop app does; `hearth run
  --tools` keeps its "always allow" grants in the app's settings (app_settings), as the app does.
* ui: the desktop app; speaks HTTP only, never imports the engine, the runner or the server
  (it uses agent for tools).
"""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
LEAVES = {"paths", "default_model", "hostport", "program", "desktop", "options"}
PACKAGES = {
    "agent",
    "client",
    "engine",
    "llamacpp",
    "plugins",
    "convert",
    "history",
    "documents",
    "app_settings",
    "launcher",
    "runner",
    "server",
    "cli",
    "ui",
}
ALLOWED: dict[str, set[str]] = {
    "agent": set(),
    "client": set(),
    "engine": set(),
    "llamacpp": {"engine"},
    "plugins": {"engine"},
    "convert": {"engine", "plugins"},
    "history": set(),
    "documents": {"history", "client"},
    "app_settings": set(),
    "launcher": {"client"},
    "runner": {"engine", "llamacpp", "plugins"},
    "server": {"engine", "plugins", "convert", "runner"},
    "cli": {
        "agent",
        "client",
        "engine",
        "plugins",
        "convert",
        "runner",
        "server",
        "launcher",
        "ui",
        "history",
        "documents",
        "app_settings",
    },
    "ui": {"agent", "client", "history", "app_settings", "launcher", "documents"},
    "paths": set(),
    "default_model": {"paths"},
    "hostport": set(),
    "program": set(),
    "desktop": {"program"},
    "options": set(),
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
            continue  # hearth/__init__.py and __main__.py
        allowed = ALLOWED[source] | ({source} if source in LEAVES else LEAVES | {source})
        for module in _imports(path):
            target = _owner(module)
            if target is not None and target not in allowed:
                found[(path.relative_to(APP).as_posix(), module)] = f"{source} -> {target}"
    return found


def test_packages_import_only_in_the_allowed_directions():
    assert violations() == {}, "imports against the rules in tests/test_imports.py"


def test_server_uses_only_the_runners_wire_protocol():
    """The service talks to a runner over HTTP: of the runner it may know the protocol only."""
    used = {
        module
        for path in (APP / "server").rglob("*.py")
        for module in _imports(path)
        if module.startswith("hearth.runner")
    }
    assert used <= {"hearth.runner.protocol"}


def test_the_layers_below_the_routes_never_import_them():
    """The service's operations speak the domain (server/errors.py, server/request_types.py);
    only the routes (server/api/) know HTTP, and app.py assembles them."""
    below = [
        path
        for path in (APP / "server").rglob("*.py")
        if path.relative_to(APP / "server").parts[0] not in ("api", "app.py")
    ]
    assert below, "no modules found below the routes"
    reaching_up = {
        (path.relative_to(APP).as_posix(), module)
        for path in below
        for module in _imports(path)
        if module == "hearth.server.api" or module.startswith("hearth.server.api.")
    }
    assert reaching_up == set()


def test_scheduling_stays_below_the_service():
    """server/scheduling/ (the scheduler, runner processes, layouts) serves the request service
    (server/service.py) and never imports it, nor the routes above it."""
    reaching_up = {
        (path.relative_to(APP).as_posix(), module)
        for path in (APP / "server" / "scheduling").rglob("*.py")
        for module in _imports(path)
        if module.startswith(("hearth.server.service", "hearth.server.api"))
    }
    assert reaching_up == set()


API_FAMILIES = {"ollama", "openai", "responses", "anthropic", "hearth"}


def test_api_families_share_only_conversions_and_schemas():
    """server/api/ is a package per API family plus `shared`: `shared` imports no family, and a
    family takes from another only its conversion or request schemas (the /v1 families build
    on OpenAI's chat conversion and on Ollama's options), never its routes."""
    api = APP / "server" / "api"
    assert {p.name for p in api.iterdir() if (p / "__init__.py").exists()} == API_FAMILIES | {
        "shared"
    }
    assert sorted(p.name for p in api.glob("*.py")) == ["__init__.py"], "a module outside a package"
    crossing = set()
    for path in api.rglob("*.py"):
        family = path.relative_to(api).parts[0]
        for module in _imports(path) | _imported_names(path):
            parts = module.split(".")
            if parts[:3] != ["hearth", "server", "api"] or len(parts) != 5:
                continue  # elsewhere, or a package itself (`from ..openai import convert`)
            if parts[3] in API_FAMILIES - {family} and (
                family == "shared" or parts[4] not in ("convert", "schemas")
            ):
                crossing.add((path.relative_to(APP).as_posix(), module))
    assert crossing == set()


def _imported_names(path: Path) -> set[str]:
    """`package.name` for each `from package import name` in `path` (the name may be a module,
    as in `from ..openai import convert`), relative imports resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


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
