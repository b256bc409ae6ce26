"""Lays out an AppImage-style AppDir around the one-folder app:

    Hearth.AppDir/AppRun                                   runs usr/lib/hearth/hearth
    Hearth.AppDir/<id>.desktop, <id>.png, .DirIcon         what appimagetool reads
    Hearth.AppDir/usr/bin/hearth -> ../lib/hearth/hearth
    Hearth.AppDir/usr/lib/hearth/                          dist/Hearth (hard links, no copy)
    Hearth.AppDir/usr/share/applications/<id>.desktop
    Hearth.AppDir/usr/share/icons/hicolor/<n>x<n>/apps/<id>.png, scalable/apps/<id>.svg
    Hearth.AppDir/usr/share/metainfo/<id>.metainfo.xml

Usage: make_appdir.py DIST_FOLDER APPDIR. The .desktop text is hearth.desktop's (the same
entry `hearth install-desktop` writes), taken from this checkout.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "build" / "pyinstaller-src"), str(ROOT / "installer")]

from make_icons import write_hicolor  # noqa: E402  (after the path is set)

from hearth.desktop import desktop_entry  # noqa: E402
from hearth.program import APP_ID  # noqa: E402

APPRUN = """#!/bin/sh
# Hearth's AppImage entry: the one-folder app in usr/lib/hearth, with this AppDir's arguments.
here="$(dirname "$(readlink -f "$0")")"
exec "$here/usr/lib/hearth/hearth" "$@"
"""


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def make_appdir(dist: Path, appdir: Path) -> None:
    if not (dist / "hearth").is_file():
        raise SystemExit(f"make_appdir: {dist}/hearth is not there; build the app first")
    if appdir.exists():
        shutil.rmtree(appdir)
    usr = appdir / "usr"
    shutil.copytree(dist, usr / "lib" / "hearth", symlinks=True, copy_function=_link_or_copy)
    (usr / "bin").mkdir(parents=True)
    (usr / "bin" / "hearth").symlink_to("../lib/hearth/hearth")
    share = usr / "share"
    write_hicolor(share / "icons")
    entry = desktop_entry(["hearth"])
    for path in (share / "applications" / f"{APP_ID}.desktop", appdir / f"{APP_ID}.desktop"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(entry, encoding="utf-8")
    (share / "metainfo").mkdir(parents=True)
    shutil.copyfile(HERE / f"{APP_ID}.metainfo.xml", share / "metainfo" / f"{APP_ID}.metainfo.xml")
    shutil.copyfile(
        share / "icons" / "hicolor" / "256x256" / "apps" / f"{APP_ID}.png", appdir / f"{APP_ID}.png"
    )
    (appdir / ".DirIcon").symlink_to(f"{APP_ID}.png")
    apprun = appdir / "AppRun"
    apprun.write_text(APPRUN)
    apprun.chmod(0o755)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: make_appdir.py DIST_FOLDER APPDIR")
    make_appdir(Path(sys.argv[1]), Path(sys.argv[2]))
