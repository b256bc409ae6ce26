"""`hearth install-desktop`: a menu entry and icons for the current user under XDG_DATA_HOME,
whose Exec runs this install's `hearth`; `--uninstall` removes them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hearth.desktop import desktop_entry, exec_line
from hearth.program import APP_ID


def _hearth(args: list[str], data_home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_DATA_HOME=str(data_home))
    return subprocess.run(
        [sys.executable, "-m", "hearth", *args], env=env, capture_output=True, text=True
    )


def _split_exec(value: str) -> list[str]:
    """An Exec value's arguments, read as the Desktop Entry spec says: string escapes first
    (a backslash written twice, \\n, \\t), then quoting (inside double quotes a backslash
    escapes ", `, $ and itself), then %% is %."""
    unescaped, i = [], 0
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value):
            unescaped.append({"\\": "\\", "n": "\n", "t": "\t", "s": " "}[value[i + 1]])
            i += 2
            continue
        unescaped.append(c)
        i += 1
    text = "".join(unescaped)
    args: list[str] = []
    current: list[str] = []
    in_arg = quoted = False
    i = 0
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1
                current.append(text[i])
            elif c == '"':
                quoted = False
            else:
                current.append(c)
        elif c == " ":
            if in_arg:
                args.append("".join(current))
                current, in_arg = [], False
        else:
            in_arg = True
            if c == '"':
                quoted = True
            else:
                current.append(c)
        i += 1
    if in_arg:
        args.append("".join(current))
    return [a.replace("%%", "%") for a in args]


def _exec_argv(entry: Path) -> list[str]:
    line = next(ln for ln in entry.read_text().splitlines() if ln.startswith("Exec="))
    return _split_exec(line.removeprefix("Exec="))


def test_install_writes_an_entry_that_runs_this_hearth_and_uninstall_removes_it(tmp_path):
    proc = _hearth(["install-desktop"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    entry = tmp_path / "applications" / f"{APP_ID}.desktop"
    svg = tmp_path / "icons" / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg"
    png = tmp_path / "icons" / "hicolor" / "256x256" / "apps" / f"{APP_ID}.png"
    assert entry.is_file() and svg.read_text().startswith("<svg") and png.stat().st_size > 0
    assert f"Icon={APP_ID}\n" in entry.read_text()
    run = subprocess.run([*_exec_argv(entry), "--version"], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.startswith("hearth "), run.stderr
    if shutil.which("desktop-file-validate"):
        check = subprocess.run(
            ["desktop-file-validate", str(entry)], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr

    proc = _hearth(["install-desktop", "--uninstall"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not entry.exists() and not svg.exists() and not png.exists()
    again = _hearth(["install-desktop", "--uninstall"], tmp_path)
    assert again.returncode == 0 and "no menu entry" in again.stdout


def test_a_folder_that_cannot_be_written_is_a_sentence(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    proc = _hearth(["install-desktop"], blocker)
    assert proc.returncode == 1
    assert proc.stderr.startswith("hearth: cannot write the menu entry")


@pytest.mark.parametrize(
    "argv",
    [
        ["/opt/My Apps/hearth"],
        ["/usr/bin/python3", "-m", "hearth"],
        ['/tmp/we"ird $dir/`x`\\y/hearth', "100%"],
        ["/tmp/tab\there/new\nline/hearth"],
    ],
)
def test_exec_quoting_gives_back_the_arguments(argv):
    line = exec_line(argv)
    assert _split_exec(line) == argv
    assert f"Exec={line}\n" in desktop_entry(argv)
