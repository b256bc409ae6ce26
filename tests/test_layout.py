"""Project hygiene that CI enforces: packaging lists every package, ruff is clean."""

from __future__ import annotations

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


def test_mypy_is_clean_on_the_engine_and_plugin_api():
    proc = subprocess.run(
        [_tool("mypy"), "app/engine", "app/plugins"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# Import name -> folder, for the packages mypy --strict checks: the plugin kit, the built-in
# plugins and the example third-party plugin.
STRICT = {
    "hearth": "app",
    "hearth_llama": "plugins/llama",
    "hearth_gemma3": "plugins/gemma3",
    "hearth_qwen2": "examples/hearth-qwen2/hearth_qwen2",
}


def test_mypy_strict_on_the_plugin_kit_and_the_plugins(tmp_path):
    # The packages live in folders not named after them (app/ is `hearth`), which mypy cannot
    # map: give it a folder of links named as they are imported.
    for name, folder in STRICT.items():
        (tmp_path / name).symlink_to(REPO / folder, target_is_directory=True)
    packages = ["hearth.plugins", *list(STRICT)[1:]]
    args = ["--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path / ".cache")]
    proc = subprocess.run(
        [_tool("mypy"), *args, *(f"-p{p}" for p in packages)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "MYPYPATH": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
