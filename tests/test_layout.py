"""Project hygiene that CI enforces: packaging lists every package, ruff and mypy are clean,
pre-commit runs them."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _import_name(folder: Path, package_dir: dict[str, str]) -> str:
    rel = folder.relative_to(REPO).as_posix()
    for name, path in sorted(package_dir.items(), key=lambda kv: -len(kv[1])):
        if rel == path or rel.startswith(path + "/"):
            rest = rel[len(path) :].strip("/")
            return ".".join([name, *rest.split("/")]) if rest else name
    raise AssertionError(f"{rel} is not under any package-dir entry")


def test_every_package_is_listed_in_pyproject():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir, listed = config["package-dir"], set(config["packages"])
    found = set()
    for root in package_dir.values():
        for init in (REPO / root).rglob("__init__.py"):
            found.add(_import_name(init.parent, package_dir))
    assert found - listed == set(), "add these to [tool.setuptools] packages"


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (it is a test dependency)")
    return path


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]])
def test_ruff_is_clean(args):
    proc = subprocess.run([_tool("ruff"), *args], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pre_commit_runs_ruff_ruff_format_and_mypy():
    text = (REPO / ".pre-commit-config.yaml").read_text()
    try:
        import yaml
    except ImportError:  # not a dependency: check the text
        for hook in ("id: ruff", "id: ruff-format", "id: mypy", ".venv/bin/mypy app/ plugins/"):
            assert hook in text, f"{hook!r} is missing from .pre-commit-config.yaml"
        return
    hooks = {h["id"]: (repo, h) for repo in yaml.safe_load(text)["repos"] for h in repo["hooks"]}
    assert {"ruff", "ruff-format", "mypy"} <= hooks.keys()
    repo, mypy = hooks["mypy"]
    assert (repo["repo"], mypy["language"]) == ("local", "system")
    assert mypy["entry"].split() == [".venv/bin/mypy", "app/", "plugins/"]
    assert mypy.get("pass_filenames") is False  # the whole trees, with the project config
    lint = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "RUF100" in lint["select"]  # suppression comments that suppress nothing fail


def test_mypy_is_clean_on_the_engine_plugin_api_service_cli_and_runner():
    # The project's config: app/server, app/cli and app/runner get --strict's per-module
    # checks from its [[tool.mypy.overrides]]; the engine and plugin API the defaults.
    targets = ["app/engine", "app/llamacpp", "app/plugins", "app/server", "app/cli", "app/runner",
               "app/documents", "app/client.py", "app/launcher.py"]  # fmt: skip
    proc = subprocess.run([_tool("mypy"), *targets], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# Import name -> folder, for the packages mypy --strict checks: the plugin kit, the built-in
# plugins and the example third-party plugin.
STRICT = {
    "hearth": "app",
    "hearth_llama": "plugins/llama",
    "hearth_gemma3": "plugins/gemma3",
    "hearth_mllama": "plugins/mllama",
    "hearth_qwen2": "plugins/qwen2",
    "hearth_qwen3": "plugins/qwen3",
    "hearth_phi3": "plugins/phi3",
    "hearth_granite": "examples/hearth-granite/hearth_granite",
    "hearth_qwen3moe": "plugins/qwen3moe",
    "hearth_gpt_oss": "plugins/gpt_oss",
}


def _mypy_strict(tmp_path: Path, targets: list[str]) -> subprocess.CompletedProcess[str]:
    # The packages live in folders not named after them (app/ is `hearth`), which mypy cannot
    # map: give it a folder of links named as they are imported.
    for name, folder in STRICT.items():
        (tmp_path / name).symlink_to(REPO / folder, target_is_directory=True)
    args = ["--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path / ".cache")]
    return subprocess.run(
        [_tool("mypy"), *args, *targets],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "MYPYPATH": str(tmp_path)},
    )


def test_mypy_strict_on_the_plugin_kit_and_the_plugins(tmp_path):
    packages = ["hearth.plugins", *list(STRICT)[1:]]
    proc = _mypy_strict(tmp_path, [f"-p{p}" for p in packages])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict_on_the_desktop_app(tmp_path):
    """The desktop app (PySide6's own stubs), its chat history and its settings."""
    proc = _mypy_strict(tmp_path, ["-phearth.ui", "-phearth.history", "-mhearth.app_settings"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_test_modules_outside_packages_have_unique_names():
    """pytest imports a test file in a folder without __init__.py by its bare name, so two
    such files with one name stop the whole suite at collection."""
    seen: dict[str, Path] = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        if (path.parent / "__init__.py").exists():
            continue
        other = seen.setdefault(path.name, path)
        assert other == path, f"{path.relative_to(REPO)} and {other.relative_to(REPO)}"


def test_no_test_module_imports_another_or_a_conftest():
    """Helpers shared between test modules live in helper modules (tests/support/, a folder's
    own helper module), not in test modules or conftest files imported by name: a test module
    imported twice runs its module-level code twice, and a bare `conftest` is whichever one
    pytest loaded last."""
    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module or ''}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            last = {name.rsplit(".", 1)[-1] for name in names if name}
            if any(n.startswith("test_") or n == "conftest" for n in last):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, "imports of test modules or conftest files: " + ", ".join(found)
