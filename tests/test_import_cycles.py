"""No import circle anywhere in Hearth's packages (app/ and the built-in plugins), counting the
imports under `if TYPE_CHECKING:` too: a module's dependencies form a tree a reader can follow.
Imports inside functions (deferred on purpose, e.g. one engine's library) are not counted."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = {
    "hearth": REPO / "app",
    "hearth_llama": REPO / "plugins" / "llama",
    "hearth_gemma3": REPO / "plugins" / "gemma3",
    "hearth_mllama": REPO / "plugins" / "mllama",
    "hearth_qwen3moe": REPO / "plugins" / "qwen3moe",
    "hearth_gpt_oss": REPO / "plugins" / "gpt_oss",
}


def modules() -> dict[str, Path]:
    found = {}
    for package, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports at module level, in `if`/`try` blocks (TYPE_CHECKING) included."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in tree.body:
        for sub in ast.walk(node) if isinstance(node, ast.If | ast.Try) else [node]:
            if isinstance(sub, ast.Import | ast.ImportFrom):
                found.append(sub)
    return found


def _all_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import, those inside functions included."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def import_graph(deferred: bool = False) -> dict[str, set[str]]:
    """Module -> the modules it imports at module level (with `deferred`: anywhere)."""
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    read = _all_imports if deferred else _module_level_imports
    for name, path in mods.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in read(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    prefix = here[: len(here) - (node.level - 1)]
                    base = ".".join(prefix + ([node.module] if node.module else []))
                # `from package import submodule` depends on the submodule, not the package
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]  # fmt: skip
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_in_hearth_or_its_plugins():
    assert cycles(import_graph()) == []


def test_the_check_finds_a_cycle_and_sees_type_checking_imports():
    graph = import_graph()
    assert "hearth.engine.ml.api" in graph["hearth.engine.ml.invariance"]  # under TYPE_CHECKING
    looped = {
        **graph,
        "hearth.engine.ml.api": {*graph["hearth.engine.ml.api"], "hearth.engine.ml.invariance"},
    }
    assert ["hearth.engine.ml.api", "hearth.engine.ml.invariance"] in cycles(looped)


def test_no_import_circle_in_hearth_documents_even_through_deferred_imports():
    """The readers choose a format module (pdf.py, word.py) inside a function; the format
    modules take the limits and DocumentError from limits.py, not from readers.py."""
    graph = import_graph(deferred=True)
    docs = {
        name: {t for t in targets if t.startswith("hearth.documents.")}
        for name, targets in graph.items()
        if name.startswith("hearth.documents.")
    }
    assert "hearth.documents.pdf" in docs["hearth.documents.readers"]  # deferred, yet seen
    assert cycles(docs) == []
