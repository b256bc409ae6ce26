"""What the running Hearth program is: its desktop id, and the command line that runs `hearth`
again (for the service's runner processes and the launcher's private service).

A leaf module anyone may import. A frozen build (PyInstaller sets `sys.frozen`) is its own
`hearth` command; a source install runs `python -m hearth` from this interpreter.
"""

from __future__ import annotations

import sys

__all__ = ["APP_ID", "frozen", "hearth_command"]

# The reverse-DNS id: the .desktop file's name, the icon's name, the AppStream id and what the
# window gives Wayland (QGuiApplication.setDesktopFileName), everywhere the same.
APP_ID = "io.github.hearth.Hearth"


def frozen() -> bool:
    """True inside a frozen build (the one-folder app of installer/)."""
    return bool(getattr(sys, "frozen", False))


def hearth_command() -> list[str]:
    """The argv prefix that runs the `hearth` command: `[sys.executable]` when frozen (the
    executable takes the subcommands itself), else `[sys.executable, "-m", "hearth"]`."""
    return [sys.executable] if frozen() else [sys.executable, "-m", "hearth"]
