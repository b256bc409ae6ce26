"""The Linux bundle, built from a clean checkout (a `git clone` of this repository's HEAD) by
installer/build-linux with this test run's interpreter (its PyInstaller and its already built
ggml): the frozen window opens offscreen, the frozen engine answers a prompt on the default
model as llama.cpp does, and the AppDir's .desktop file and metainfo validate."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oracle import llamacpp_greedy_text

REPO = Path(__file__).resolve().parents[2]
APP_ID = "io.github.hearth.Hearth"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux bundle"),
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git to clone the checkout"),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The clone, after installer/build-linux ran in it (its output is shown on failure)."""
    pytest.importorskip("PyInstaller")
    clone = tmp_path_factory.mktemp("bundle") / "hearth"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    env = dict(os.environ, PYTHON=sys.executable)
    env.pop("HEARTH_HOST", None)
    start = time.perf_counter()
    proc = subprocess.run(
        [str(clone / "installer" / "build-linux")],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    print(f"\nbuild-linux took {elapsed:.0f} s\n{proc.stdout[-1500:]}")
    return clone


def _frozen(
    clone: Path, *args: str, home: Path, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HEARTH_HOME=str(home), QT_QPA_PLATFORM="offscreen")
    env.pop("HEARTH_HOST", None)
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [str(clone / "dist" / "Hearth" / "hearth"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=clone.parent,  # not the checkout: nothing may come from the sources
    )


def test_the_bundle_is_self_contained_and_lean(built: Path):
    internal = built / "dist" / "Hearth" / "_internal"
    names = [p.relative_to(internal).as_posix() for p in internal.rglob("*")]
    for needed in ("ggml/lib/libggml.so", "llama_cpp/lib/libllama.so", "libpython3.11.so.1.0"):
        assert needed in names, needed
    assert any(n.startswith("hearth/engine/ml/_kernels") for n in names)
    assert any(n.startswith("PySide6/Qt/plugins/platforms/libqxcb.so") for n in names)
    assert f"hearth/assets/{APP_ID}.png" in names
    for unwanted in ("torch", "transformers", "pytest", "QtQml", "QtQuick", "WebEngine", "Qt3D"):
        assert not [n for n in names if unwanted in n], unwanted


def test_the_frozen_window_opens_offscreen(built: Path, tmp_path: Path):
    proc = _frozen(built, "--smoke-test", home=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"the window is shown (desktop file {APP_ID})" in proc.stdout


def test_the_frozen_app_checks_the_x11_libraries_before_qt_starts(built: Path, tmp_path: Path):
    # The same check the window runs first, inside the bundle: it finds the bundled Qt and
    # loads each system library its xcb plugin needs (bundled ones through the bundle's path).
    # On a machine that lacks some (no desktop: .ci/run installs them where it can), the
    # frozen app must name the same ones as the check run from source, with status 1.
    here = subprocess.run(
        [sys.executable, "-m", "hearth.ui.preflight"], capture_output=True, text=True
    )
    proc = _frozen(built, "-m", "hearth.ui.preflight", home=tmp_path)
    if here.returncode != 0:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        missing = re.search(r"missing: ([^.]+)\.", here.stdout).group(1)
        assert f"missing: {missing}." in proc.stdout
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    count = int(re.search(r"all (\d+) system libraries", proc.stdout).group(1))
    assert count >= 10


def test_the_frozen_engine_answers_as_llama_cpp_does(built: Path, gemma3_path, tmp_path):
    prompt = "The capital of France is"
    expected = llamacpp_greedy_text(gemma3_path, prompt, 8, tmp_path)
    assert expected.strip()
    # `run` starts the frozen service, which starts a frozen runner for the built-in model.
    args = ["run", "gemma3:270m", prompt, "--raw", "--num-predict", "8", "--temperature", "0"]
    proc = _frozen(built, *args, "--repeat-penalty", "1", home=tmp_path / "home")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip("\n") == expected.rstrip("\n")


def test_the_frozen_runner_loads_a_model_with_llama_cpp_too(built: Path, gemma3_path, tmp_path):
    # llama.cpp's libraries (llama_cpp/lib) beside ggml's own (ggml/lib): both load in a frozen
    # runner, each its own copy of libggml.
    env = dict(os.environ, HEARTH_HOME=str(tmp_path), HEARTH_RUNNER_TOKEN="test")
    exe = built / "dist" / "Hearth" / "hearth"
    args = ["runner", "--model", str(gemma3_path), "--engine", "llamacpp", "--num-ctx", "512"]
    runner = subprocess.Popen(
        [str(exe), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        events = [json.loads(line) for line in _lines_until_ready(runner)]
    finally:
        runner.kill()
        _, err = runner.communicate(timeout=30)
    assert events and events[-1]["event"] == "ready", err[-2000:]
    assert events[-1]["info"]["engine"] == "llamacpp"
    assert events[-1]["info"]["architecture"] == "gemma3"


def _lines_until_ready(proc: subprocess.Popen[str]) -> list[str]:
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if '"ready"' in line or '"error"' in line:
            break
    return lines


def test_the_appdir_desktop_file_and_metainfo_validate(built: Path):
    appdir = built / "dist" / "Hearth.AppDir"
    entry = appdir / f"{APP_ID}.desktop"
    assert (appdir / "usr" / "share" / "applications" / entry.name).read_text() == entry.read_text()
    for size in (16, 32, 48, 64, 128, 256, 512):
        assert (appdir / f"usr/share/icons/hicolor/{size}x{size}/apps/{APP_ID}.png").is_file()
    apprun = subprocess.run(
        [str(appdir / "AppRun"), "--version"], capture_output=True, text=True, timeout=60
    )
    assert apprun.returncode == 0 and apprun.stdout.startswith("hearth "), apprun.stderr
    if shutil.which("desktop-file-validate") is None:
        pytest.skip("desktop-file-validate is not installed (Debian: desktop-file-utils)")
    check = subprocess.run(["desktop-file-validate", str(entry)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    if shutil.which("appstreamcli"):
        metainfo = appdir / "usr" / "share" / "metainfo" / f"{APP_ID}.metainfo.xml"
        check = subprocess.run(
            ["appstreamcli", "validate", "--no-net", str(metainfo)], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
