"""The example third-party plugin (examples/hearth-granite) as its users get it: installed with
pip into a folder of its own (the project's environment is left as it was), found through its
entry point, passing its own tests (the conformance suite, with parity against llama.cpp),
and used by `hearth run`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hearth.plugins.testing import LLAMACPP_LOGITS, TinyTransformer, run_oracle, write_tiny_model

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "hearth-granite"
TINY = TinyTransformer("granite", metadata={"embedding_scale": 12.0, "residual_scale": 0.22,
                       "logit_scale": 8.0}, embedding_scale=0.05)  # fmt: skip


def _env(site: Path | None, **extra: str) -> dict[str, str]:
    env = dict(os.environ, **extra)
    paths = [str(site)] if site else []
    paths += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip install --target`: a wheel built from a copy of the example (so no build files
    land in the repository) and installed into a temporary folder."""
    tmp = tmp_path_factory.mktemp("granite-plugin")
    source = shutil.copytree(EXAMPLE, tmp / "src", ignore=shutil.ignore_patterns("tests"))
    target = tmp / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation"]
    proc = subprocess.run(
        [*pip, "--no-index", "--target", str(target), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entry_points = next(target.glob("hearth_granite-*.dist-info")) / "entry_points.txt"
    assert "[hearth.plugins]" in entry_points.read_text()
    return target


def test_the_plugin_passes_its_own_tests_with_the_conformance_suite(site):
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests"],
        cwd=EXAMPLE,
        env=_env(site),
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    # Hearth's writer's file and a transformers checkpoint converted by llama.cpp
    assert proc.stdout.count("passed  parity: top-1") == 2
    assert "4 passed" in proc.stdout


def _hearth_run(
    site: Path | None, model: Path, prompt: str, home: Path, engine: str = "auto"
) -> subprocess.CompletedProcess:
    args = ["run", str(model), prompt, "--raw", "--num-predict", "24", "--temperature", "0"]
    args += ["--repeat-penalty", "1"]  # plain greedy, as the oracle does
    return subprocess.run(
        [sys.executable, "-m", "hearth", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(site, HEARTH_HOME=str(home), HEARTH_ENGINE=engine),
        cwd=REPO,
    )


def test_hearth_run_uses_the_installed_plugin(site, tmp_path):
    model = write_tiny_model(tmp_path / "tiny-granite.gguf", TINY)
    prompt = "once upon a time"
    request = {"model": str(model), "n_ctx": 256, "prompts": [{"text": prompt}], "greedy": 24}
    oracle = run_oracle(LLAMACPP_LOGITS, dict(request, stop_at_eog=True), tmp_path)
    expected = bytes(oracle["greedy_text_0"]).decode("utf-8", "replace")
    assert len(oracle["greedy_0"]) > 10 and len(expected.strip()) > 10

    # Without the plugin, Hearth's own engine cannot run it (a sentence naming the architecture)...
    without = _hearth_run(None, model, prompt, tmp_path / "home-without", engine="hearth")
    assert without.returncode == 1 and "'granite'" in without.stderr, without.stderr
    # ... and `auto` runs it on the llama.cpp compatibility engine instead.
    fallback = _hearth_run(None, model, prompt, tmp_path / "home-fallback")
    assert fallback.returncode == 0, fallback.stderr
    assert fallback.stdout.strip() == expected.strip()

    # With the plugin installed, Hearth's own engine runs it.
    proc = _hearth_run(site, model, prompt, tmp_path / "home", engine="hearth")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == expected.strip()  # llama.cpp's greedy text, token for token
