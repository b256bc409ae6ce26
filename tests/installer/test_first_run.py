"""A first run that explains itself: before Qt starts, a system library that Qt's X11 (xcb)
platform plugin needs and cannot load is named, with the package that provides it on
Debian/Ubuntu and on Fedora; `hearth` prints that and exits 1 instead of Qt's abort. The
missing library is simulated by patching the loader check (`library_loads`)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hearth import cli
from hearth.program import APP_ID
from hearth.ui import preflight
from hearth.ui.preflight import (
    check_display_libraries,
    install_hint,
    missing_libraries,
    needed_libraries,
    qt_dirs,
    uses_xcb,
)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="xcb is Linux's")


def _without(*sonames: str):
    return lambda name: name not in sonames


@linux_only
def test_the_elf_reader_lists_what_the_xcb_plugin_needs():
    # readelf, an independent reader, where it is installed; else the sonames Qt 6.5+ links.
    lib_dir, plugins = qt_dirs()
    plugin = plugins / "libqxcb.so"
    needed = needed_libraries(plugin)
    assert {"libxcb-cursor.so.0", "libxcb.so.1", "libQt6XcbQpa.so.6"} <= set(needed)
    try:
        out = subprocess.run(["readelf", "-d", str(plugin)], capture_output=True, text=True)
    except FileNotFoundError:
        return
    expected = [
        line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines() if "(NEEDED)" in line
    ]
    assert needed == expected


def test_a_file_that_is_not_elf_needs_nothing(tmp_path: Path):
    junk = tmp_path / "libjunk.so"
    junk.write_bytes(b"not an ELF file at all")
    assert needed_libraries(junk) == []
    assert needed_libraries(tmp_path / "absent.so") == []


@linux_only
def test_missing_libraries_are_the_ones_that_do_not_load():
    lib_dir, plugins = qt_dirs()
    assert missing_libraries(lib_dir, plugins, loads=_without("libxcb-cursor.so.0")) == [
        "libxcb-cursor.so.0"
    ]
    # Qt's own libraries (shipped beside it) are never asked for.
    asked: list[str] = []
    missing_libraries(lib_dir, plugins, loads=lambda s: asked.append(s) or True)
    assert asked and not [s for s in asked if s.startswith("libQt6")]


def test_the_sentence_names_the_packages_for_debian_and_fedora():
    text = install_hint(["libxcb-cursor.so.0", "libxkbcommon-x11.so.0", "libxcb-shape.so.0"])
    assert "libxcb-cursor.so.0" in text
    assert "sudo apt install libxcb-cursor0 libxkbcommon-x11-0 libxcb-shape0" in text
    assert "sudo dnf install xcb-util-cursor libxkbcommon-x11 libxcb" in text
    unknown = install_hint(["libunheard.so.3"])
    assert "libunheard.so.3" in unknown and "sudo apt install" in unknown


@pytest.mark.parametrize(
    ("env", "xcb"),
    [
        ({}, True),
        ({"QT_QPA_PLATFORM": "xcb"}, True),
        ({"QT_QPA_PLATFORM": "offscreen"}, False),
        ({"QT_QPA_PLATFORM": "wayland;xcb"}, False),
        ({"XDG_SESSION_TYPE": "wayland", "WAYLAND_DISPLAY": "wayland-0"}, False),
        ({"XDG_SESSION_TYPE": "x11", "DISPLAY": ":0"}, True),
    ],
)
@linux_only
def test_only_a_start_on_xcb_is_checked(env: dict[str, str], xcb: bool):
    assert uses_xcb(env) is xcb
    found = check_display_libraries(env, loads=_without("libxcb-cursor.so.0"))
    assert (found is not None) is xcb


@linux_only
def test_hearth_prints_the_sentence_and_exits_1_before_qt_starts(monkeypatch, capsys):
    monkeypatch.setattr(preflight, "library_loads", _without("libxcb-cursor.so.0"))
    for name in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DISPLAY", ":99")
    started: list[object] = []
    monkeypatch.setattr("hearth.ui.app.main", lambda argv: started.append(argv) or 0)
    with pytest.raises(SystemExit) as end:
        cli.main([])
    assert end.value.code == 1
    assert started == []  # the window was never started
    err = capsys.readouterr().err
    assert "libxcb-cursor.so.0" in err
    assert "sudo apt install libxcb-cursor0" in err and "sudo dnf install xcb-util-cursor" in err


@linux_only
def test_the_check_on_its_own_says_what_is_missing(monkeypatch, capsys):
    monkeypatch.setattr(preflight, "library_loads", _without("libxkbcommon-x11.so.0"))
    assert preflight.main() == 1
    assert "sudo apt install libxkbcommon-x11-0" in capsys.readouterr().out
    monkeypatch.setattr(preflight, "library_loads", lambda name: True)
    assert preflight.main() == 0
    assert "system libraries Qt's xcb plugin needs load" in capsys.readouterr().out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="offscreen Qt on Linux")
def test_the_window_opens_and_smoke_test_exits_0(tmp_path: Path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HEARTH_HOME=str(tmp_path))
    env.pop("HEARTH_HOST", None)
    proc = subprocess.run(
        [sys.executable, "-m", "hearth", "--smoke-test"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the window is shown" in proc.stdout
    # Wayland finds the icon through the desktop file's id, the .desktop file's name.
    assert f"(desktop file {APP_ID})" in proc.stdout


def test_the_readme_says_what_hearth_says():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    sentence = install_hint(["libxcb-cursor.so.0"])
    assert " ".join(sentence.split()) in " ".join(readme.split())


def _loaded_path(soname: str) -> str | None:
    """Where the dynamic loader finds `soname` (None when it does not)."""
    try:
        ctypes.CDLL(soname)
    except OSError:
        return None
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if Path(path).name.startswith(soname.split(".so")[0] + ".so"):
            return path
    return None


def _can_mask_files() -> bool:
    if shutil.which("unshare") is None or not sys.platform.startswith("linux"):
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_mask_files(), reason="needs `unshare -m` (root) to hide a library")
def test_a_really_missing_xcb_cursor_library_is_named_where_qt_would_abort(tmp_path: Path):
    # libxcb-cursor.so.0 hidden for real (a private mount namespace binds /dev/null over it):
    # Qt itself aborts there; `hearth` names the package instead.
    lib = _loaded_path("libxcb-cursor.so.0")
    if lib is None:
        pytest.skip("libxcb-cursor.so.0 is not installed here")
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=":99", HEARTH_HOME=str(tmp_path), XDG_SESSION_TYPE="x11")
    qt = f"{sys.executable} -c 'from PySide6.QtWidgets import QApplication; QApplication([])'"
    script = (
        f"mount --bind /dev/null {lib} || exit 99; "
        f"QT_QPA_PLATFORM=xcb {qt}; echo qt-status=$?; {sys.executable} -m hearth"
    )
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert "qt-status=0" not in proc.stdout and "qt-status=" in proc.stdout, proc.stdout
    assert "Could not load the Qt platform plugin" in proc.stderr  # Qt's own abort
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # named with whatever else this machine lacks (a machine without a desktop may lack more)
    dirs = qt_dirs()
    assert dirs is not None
    hidden = "libxcb-cursor.so.0"
    expected = missing_libraries(
        *dirs, loads=lambda soname: soname != hidden and preflight.library_loads(soname)
    )
    assert hidden in expected
    assert "hearth: " + install_hint(expected) in proc.stderr
