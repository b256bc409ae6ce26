"""The desktop side of the `hearth` command: `hearth install-desktop` (a menu entry and icon for
the current user, for source installs) and the check made before the window opens."""

from __future__ import annotations

import argparse
import sys

from ..desktop import install_desktop, uninstall_desktop

__all__ = ["add_install_desktop", "install_desktop_command", "display_libraries_sentence"]


def add_install_desktop(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser(
        "install-desktop",
        help="add Hearth to this user's application menu (XDG_DATA_HOME/applications)",
    )
    cmd.add_argument("--uninstall", action="store_true", help="remove the entry and its icons")


def install_desktop_command(args: argparse.Namespace) -> int:
    """Write (or with --uninstall remove) the menu entry and icons; 1 with a sentence when a
    folder cannot be written."""
    try:
        paths = uninstall_desktop() if args.uninstall else install_desktop()
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        print(f"hearth: cannot write the menu entry{where}: {e.strerror or e}", file=sys.stderr)
        return 1
    if args.uninstall:
        print("removed " + ", ".join(map(str, paths)) if paths else "no menu entry was installed")
    else:
        print("Hearth is in the application menu: " + ", ".join(map(str, paths)))
    return 0


def display_libraries_sentence() -> str | None:
    """Before Qt starts: the sentence naming the missing system libraries (and the packages
    to install) that would make Qt abort, else None (hearth.ui.preflight)."""
    from ..ui.preflight import check_display_libraries

    return check_display_libraries()
