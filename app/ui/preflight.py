"""Before Qt starts: the system libraries Qt's X11 platform plugin (xcb) needs, checked so that a
missing one is a sentence naming the package to install, not Qt's abort ("Could not load the
Qt platform plugin xcb").

Qt's shared libraries come with PySide6 (or inside the frozen app); the X11 ones (the xcb
utility libraries, xkbcommon, ...) come from the system. On a minimal desktop
`libxcb-cursor0` is often missing. `missing_libraries()` reads the ELF dependencies of the
xcb plugin and of the Qt libraries it loads, and tries to load (dlopen) each one that Qt does
not ship; `check_display_libraries()` turns what failed into the sentence.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import struct
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

__all__ = [
    "PACKAGES",
    "check_display_libraries",
    "install_hint",
    "missing_libraries",
    "needed_libraries",
    "qt_dirs",
    "uses_xcb",
]

# soname -> (Debian/Ubuntu package, Fedora package).
PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxcb-xinput.so.0": ("libxcb-xinput0", "libxcb"),
    "libxcb-glx.so.0": ("libxcb-glx0", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libSM.so.6": ("libsm6", "libSM"),
    "libICE.so.6": ("libice6", "libICE"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
}

# Qt's own libraries the xcb plugin loads (their system dependencies are checked too).
_QT_LIBS = ("libQt6XcbQpa.so.6", "libQt6Gui.so.6", "libQt6Widgets.so.6", "libQt6Core.so.6")

_DT_NEEDED, _DT_STRTAB = 1, 5
_PT_DYNAMIC, _PT_LOAD = 2, 1


def needed_libraries(path: Path) -> list[str]:
    """The sonames an ELF shared library names as DT_NEEDED, in order; [] for a file that is
    not a 64- or 32-bit little-endian ELF (nothing to check there)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    if data[:4] != b"\x7fELF" or data[5] != 1:  # little-endian only (x86, arm)
        return []
    wide = data[4] == 2
    if wide:
        phoff, phentsize, phnum = (
            struct.unpack_from("<Q", data, 0x20)[0],
            *struct.unpack_from("<HH", data, 0x36),
        )
        ph_fmt, dyn_fmt = "<IIQQQQQQ", "<qQ"
    else:
        phoff, phentsize, phnum = (
            struct.unpack_from("<I", data, 0x1C)[0],
            *struct.unpack_from("<HH", data, 0x2A),
        )
        ph_fmt, dyn_fmt = "<IIIIIIII", "<iI"
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic = None
    for i in range(phnum):
        fields = struct.unpack_from(ph_fmt, data, phoff + i * phentsize)
        if wide:
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = fields[:6]
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz = fields[:5]
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return []
    entries: list[tuple[int, int]] = []
    step = struct.calcsize(dyn_fmt)
    for at in range(dynamic[0], dynamic[0] + dynamic[1], step):
        tag, value = struct.unpack_from(dyn_fmt, data, at)
        if tag == 0:
            break
        entries.append((tag, value))
    strtab = next((v for t, v in entries if t == _DT_STRTAB), None)
    if strtab is None:
        return []
    base = next((off + strtab - va for va, off, size in loads if va <= strtab < va + size), None)
    if base is None:
        return []
    names = []
    for tag, value in entries:
        if tag == _DT_NEEDED:
            end = data.index(b"\0", base + value)
            names.append(data[base + value : end].decode("ascii", "replace"))
    return names


def qt_dirs() -> tuple[Path, Path] | None:
    """(Qt's lib folder, its platforms plugin folder) from the installed PySide6, without
    importing it (None when PySide6 is not there)."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    qt = Path(next(iter(spec.submodule_search_locations))) / "Qt"
    return qt / "lib", qt / "plugins" / "platforms"


def library_loads(soname: str) -> bool:
    """True when the dynamic loader finds and loads `soname` (as Qt would)."""
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def missing_libraries(
    lib_dir: Path,
    plugin_dir: Path,
    loads: Callable[[str], bool] | None = None,
) -> list[str]:
    """The system libraries the xcb plugin (and the Qt libraries it uses) need that do not
    load (`loads`, default `library_loads`), in the order first named. Libraries Qt ships in
    `lib_dir` are not checked."""
    loads = loads or library_loads
    shipped = {p.name for p in lib_dir.glob("*.so*")} if lib_dir.is_dir() else set()
    files = [plugin_dir / "libqxcb.so", *(lib_dir / name for name in _QT_LIBS)]
    missing: list[str] = []
    seen: set[str] = set()
    for path in files:
        for soname in needed_libraries(path):
            if soname in seen or soname in shipped:
                continue
            seen.add(soname)
            if not loads(soname):
                missing.append(soname)
    return missing


def install_hint(missing: Iterable[str]) -> str:
    """The sentence naming what is missing and the packages that provide it on Debian/Ubuntu
    and on Fedora."""
    missing = list(missing)
    debian: list[str] = []
    fedora: list[str] = []
    for soname in missing:
        deb, fed = PACKAGES.get(soname, (f"<the package with {soname}>",) * 2)
        debian += [deb] if deb not in debian else []
        fedora += [fed] if fed not in fedora else []
    return (
        f"Hearth's window needs system libraries that are missing: {', '.join(missing)}. "
        f"Install them, then start Hearth again: on Debian or Ubuntu "
        f"`sudo apt install {' '.join(debian)}`, on Fedora `sudo dnf install {' '.join(fedora)}`."
    )


def uses_xcb(env: Mapping[str, str]) -> bool:
    """Whether Qt will use its X11 (xcb) plugin: on Linux, when QT_QPA_PLATFORM names xcb
    first, or is unset outside a Wayland session."""
    if not sys.platform.startswith("linux"):
        return False
    platform = env.get("QT_QPA_PLATFORM", "").strip()
    if platform:
        return platform.split(";")[0].split(":")[0] == "xcb"
    wayland = env.get("XDG_SESSION_TYPE") == "wayland" and bool(env.get("WAYLAND_DISPLAY"))
    return not wayland


def check_display_libraries(
    env: Mapping[str, str] | None = None,
    loads: Callable[[str], bool] | None = None,
) -> str | None:
    """None when the window can start; else the sentence to print (install what is missing)."""
    if not uses_xcb(os.environ if env is None else env):
        return None
    dirs = qt_dirs()
    if dirs is None:
        return None
    missing = missing_libraries(*dirs, loads=loads)
    return install_hint(missing) if missing else None


def main() -> int:
    """`python -m hearth.ui.preflight` (in the frozen app: `hearth -m hearth.ui.preflight`):
    the check, whatever the session: the sentence and status 1, or how many libraries were
    checked and status 0."""
    dirs = qt_dirs()
    if dirs is None or not (dirs[1] / "libqxcb.so").is_file():
        print("Qt's xcb platform plugin is not installed here")
        return 1
    checked: list[str] = []

    def loads(name: str) -> bool:
        checked.append(name)
        return library_loads(name)

    missing = missing_libraries(*dirs, loads=loads)
    if missing:
        print(install_hint(missing))
        return 1
    print(f"all {len(checked)} system libraries Qt's xcb plugin needs load")
    return 0


if __name__ == "__main__":
    sys.exit(main())
