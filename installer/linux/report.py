"""Prints what the build made: the bundle's size, its start-up times (`hearth --version`, and
the window shown offscreen with --smoke-test, in a throw-away HEARTH_HOME), and whether the
AppDir's .desktop file and metainfo validate (where desktop-file-validate and appstreamcli
are installed).

Cold means the bundle's files are not in the page cache: they are evicted first
(posix_fadvise DONTNEED on each file; only this bundle's pages, nothing else of the machine's).
Warm is the same command run again at once.

Usage: report.py DIST_FOLDER APPDIR
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def folder_size(path: Path) -> int:
    """Bytes in the files under `path` (links not followed, hard links counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(root, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def evict(path: Path) -> None:
    """Drop `path`'s files from the page cache (where the system allows it)."""
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
            finally:
                os.close(fd)


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    return time.perf_counter() - start, proc


def main(dist: Path, appdir: Path) -> int:
    exe = dist / "hearth"
    failed = 0
    print(f"Bundle size: {folder_size(dist) / 2**20:.0f} MiB ({dist})")
    with tempfile.TemporaryDirectory(prefix="hearth-report-") as home:
        env = dict(os.environ, HEARTH_HOME=home, QT_QPA_PLATFORM="offscreen")
        env.pop("HEARTH_HOST", None)
        for what, args in (
            ("`hearth --version`", ["--version"]),
            ("window shown (offscreen)", ["--smoke-test"]),
        ):
            evict(dist)
            cold, proc = timed([str(exe), *args], env)
            warm, again = timed([str(exe), *args], env)
            ok = proc.returncode == 0 and again.returncode == 0
            status = "" if ok else " FAILED"
            print(f"Start-up, {what}: {cold:.2f} s cold, {warm:.2f} s warm{status}")
            if not ok:
                print(proc.stdout + proc.stderr, file=sys.stderr)
            failed += not ok
    desktop = next(appdir.glob("*.desktop"))
    metainfo = next((appdir / "usr" / "share" / "metainfo").glob("*.xml"))
    for tool, args in (
        ("desktop-file-validate", [str(desktop)]),
        ("appstreamcli", ["validate", "--no-net", str(metainfo)]),
    ):
        if shutil.which(tool) is None:
            print(f"{tool}: not installed, not checked")
            continue
        proc = subprocess.run([tool, *args], capture_output=True, text=True)
        print(f"{tool}: " + ("passed" if proc.returncode == 0 else "FAILED"))
        if proc.returncode != 0 or proc.stdout.strip():
            print((proc.stdout + proc.stderr).strip())
        failed += proc.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: report.py DIST_FOLDER APPDIR")
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
