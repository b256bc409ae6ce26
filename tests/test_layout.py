"""Project hygiene that CI enforces: packaging lists every package, ruff is clean."""

from __future__ import annotations

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


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]])
def test_ruff_is_clean(args):
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    proc = subprocess.run([ruff, *args], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
