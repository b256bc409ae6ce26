"""Hearth's desktop menu entry (freedesktop.org): the one `.desktop` file, written for the
installed app (`hearth install-desktop`, for a source install or a frozen one) and for the
AppDir (installer/linux), and its icons (in the package: `hearth/assets/`).

The entry's name and the icon's name are `hearth.program.APP_ID`, which the window also gives
Wayland, so the compositor shows the icon. Qt-free, a leaf module.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from .program import APP_ID, hearth_command

__all__ = [
    "ASSETS",
    "desktop_entry",
    "desktop_paths",
    "exec_line",
    "install_desktop",
    "uninstall_desktop",
]

ASSETS = Path(__file__).resolve().parent / "assets"  # the SVG icon and a 256 px PNG

# Characters the Desktop Entry spec says an Exec argument must be quoted for.
_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`=%")


def exec_line(argv: Sequence[str]) -> str:
    """`argv` as a .desktop Exec value, by the Desktop Entry spec: arguments with reserved
    characters double-quoted (with `"`, `` ` ``, `$` and `\\` backslash-escaped), `%` doubled,
    and then, as in every string value, each backslash written twice (newline and tab as
    `\\n`, `\\t`)."""
    out = []
    for arg in argv:
        arg = arg.replace("%", "%%")
        if arg and not (set(arg) & _RESERVED):
            out.append(arg)
            continue
        escaped = "".join("\\" + c if c in '"`$\\' else c for c in arg)
        out.append(f'"{escaped}"')
    value = " ".join(out).replace("\\", "\\\\")
    return value.replace("\n", "\\n").replace("\t", "\\t")


def desktop_entry(command: Sequence[str] | None = None) -> str:
    """The .desktop file's text; Exec runs `command` (default: this install's `hearth`)."""
    return "\n".join(
        [
            "[Desktop Entry]",
            "Type=Application",
            "Name=Hearth",
            "GenericName=AI Chat",
            "Comment=Chat with language models that run on your own computer",
            f"Exec={exec_line(command or hearth_command())}",
            f"Icon={APP_ID}",
            "Terminal=false",
            "Categories=Utility;",
            "Keywords=AI;LLM;chat;GGUF;Ollama;",
            "StartupNotify=true",
            "",
        ]
    )


def _data_home(data_home: Path | None) -> Path:
    if data_home is not None:
        return data_home
    env = os.environ.get("XDG_DATA_HOME", "")
    return Path(env) if os.path.isabs(env) else Path.home() / ".local" / "share"


def desktop_paths(data_home: Path | None = None) -> dict[str, Path]:
    """Where the entry and icons go for the current user: under XDG_DATA_HOME (default
    ~/.local/share), `applications/<id>.desktop` and `icons/hicolor/.../<id>.{svg,png}`."""
    root = _data_home(data_home)
    icons = root / "icons" / "hicolor"
    return {
        "desktop": root / "applications" / f"{APP_ID}.desktop",
        "svg": icons / "scalable" / "apps" / f"{APP_ID}.svg",
        "png": icons / "256x256" / "apps" / f"{APP_ID}.png",
    }


def install_desktop(
    data_home: Path | None = None, command: Sequence[str] | None = None
) -> list[Path]:
    """Write the menu entry and the icons for the current user; the files written. An
    OSError (a folder that cannot be written) propagates with its path."""
    paths = desktop_paths(data_home)
    for path in paths.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ASSETS / f"{APP_ID}.svg", paths["svg"])
    shutil.copyfile(ASSETS / f"{APP_ID}.png", paths["png"])
    tmp = paths["desktop"].with_suffix(".tmp")
    tmp.write_text(desktop_entry(command), encoding="utf-8")
    tmp.replace(paths["desktop"])
    return list(paths.values())


def uninstall_desktop(data_home: Path | None = None) -> list[Path]:
    """Remove what `install_desktop` wrote; the files removed (none when none was there)."""
    removed = []
    for path in desktop_paths(data_home).values():
        if path.exists():
            path.unlink()
            removed.append(path)
    return removed
