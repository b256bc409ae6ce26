"""Two fixes to the CUDA wheels build-cuda.sh makes, each wheel rewritten in place:

* Slim: drop the second copy of the shared libraries that ggml-python's and llama-cpp-python's
  wheels carry. scikit-build installs each library both into the package (`ggml/lib/`,
  `llama_cpp/lib/`, where the package loads it from) and into a top-level `lib/` that nothing
  loads. With CUDA the copy is half the wheel (libggml-cuda.so is about 33 MB for one
  architecture), and the GPU machine's calls carry at most 64 MiB. A top-level `lib/X` is
  dropped only when the wheel has `<package>/lib/X` with the same bytes. Likewise the extra
  copies of a library under its versioned names (see `_version_copies`).
* Bindings: ggml-python 0.0.45 binds `ggml_backend_cuda_allreduce_tensor`, which its vendored
  ggml declares but no longer defines, so `import ggml` fails on any CUDA build
  (AttributeError at import). A binding of a CUDA function that no library in the wheel
  exports is switched off (`enabled=False`: calling it raises, as for a backend not built).
  Hearth calls none of them.

    python bench/gpu/slim_wheel.py WHEEL...

RECORD is rewritten to match. Prints the sizes before and after and each binding switched off.
"""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

_CUDA_ONLY = re.compile(r"enabled=GGML_USE_CUDA\b")  # not GGML_USE_CUDA_LOG_CALLBACK
_BINDING = re.compile(r'@ggml_function\(\s*"(?P<name>[^"]+)"(?P<body>.*?)\)\ndef', re.S)


def _exported(entries: dict[str, bytes]) -> set[str]:
    """The dynamic symbols the wheel's shared libraries define (binutils' nm)."""
    names: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in entries.items():
            if name.endswith(".so") and "/lib/" in name:
                path = Path(tmp) / name.replace("/", "_")
                path.write_bytes(data)
                out = subprocess.run(["nm", "-D", "--defined-only", str(path)], check=True,
                                     capture_output=True, text=True).stdout  # fmt: skip
                names |= {line.split()[-1] for line in out.splitlines() if line.strip()}
    return names


def disable_missing_bindings(source: str, exported: set[str]) -> tuple[str, list[str]]:
    """`source` (ggml-python's ggml.py) with each CUDA binding whose function is not in
    `exported` switched off; and their names."""
    off: list[str] = []

    def fix(m: re.Match[str]) -> str:
        body = m.group("body")
        if not _CUDA_ONLY.search(body) or m.group("name") in exported:
            return m.group(0)
        off.append(m.group("name"))
        return _CUDA_ONLY.sub("enabled=False", m.group(0))

    return _BINDING.sub(fix, source), off


# Libraries only the dynamic linker loads (by soname, from another library's DT_NEEDED), never
# Python by file name: their unversioned copy can go too.
_LINKED_ONLY = {"libggml-cuda.so"}
_FULL_VERSION = re.compile(r"\.so\.\d+\.\d+")


def _version_copies(entries: dict[str, bytes]) -> set[str]:
    """Copies of one library under its versioned names (a wheel stores libX.so, libX.so.0 and
    libX.so.0.25.3 as three files: zip has no symlinks): the soname (`libX.so.0`, what other
    libraries name) stays, the fully versioned name goes, and the unversioned one goes where
    Python never loads it (`_LINKED_ONLY`)."""
    by_bytes: dict[bytes, list[str]] = {}
    for name, data in entries.items():
        if "/lib/" in name and not name.startswith("lib/") and ".so" in name:
            by_bytes.setdefault(hashlib.sha256(data).digest(), []).append(name)
    drop: set[str] = set()
    for names in by_bytes.values():
        if len(names) < 2:
            continue
        for name in names:
            base = Path(name).name
            if _FULL_VERSION.search(base) or base in _LINKED_ONLY:
                drop.add(name)
        if len(drop & set(names)) == len(names):  # never all of them
            drop -= {min(names, key=len)}
    return drop


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def slim(wheel: Path) -> tuple[int, int]:
    before = wheel.stat().st_size
    with zipfile.ZipFile(wheel) as z:
        entries = {i.filename: z.read(i) for i in z.infolist()}
        infos = {i.filename: i for i in z.infolist()}
    changed: set[str] = set()
    if "ggml/ggml.py" in entries:
        text, off = disable_missing_bindings(entries["ggml/ggml.py"].decode(), _exported(entries))
        if off:
            entries["ggml/ggml.py"] = text.encode()
            changed.add("ggml/ggml.py")
            print(f"slim_wheel: bindings switched off (not exported): {off}", file=sys.stderr)
    packaged = {
        Path(n).name: hashlib.sha256(d).digest()
        for n, d in entries.items()
        if "/lib/" in n and not n.startswith("lib/")
    }
    drop = {
        n
        for n, d in entries.items()
        if n.startswith("lib/") and packaged.get(Path(n).name) == hashlib.sha256(d).digest()
    }
    drop |= _version_copies(entries)
    if not drop and not changed:
        return before, before
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in entries.items():
            if name in drop:
                continue
            if name.endswith(".dist-info/RECORD"):
                lines = [ln for ln in data.decode().splitlines() if ln.split(",")[0] not in drop]
                lines = [
                    _record_line(ln.split(",")[0], entries[ln.split(",")[0]])
                    if ln.split(",")[0] in changed
                    else ln
                    for ln in lines
                ]
                data = "".join(f"{ln}\n" for ln in lines).encode()
            out.writestr(infos[name], data, compress_type=zipfile.ZIP_DEFLATED)
    tmp.replace(wheel)
    return before, wheel.stat().st_size


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        a, b = slim(Path(arg))
        print(f"slim_wheel: {Path(arg).name}: {a >> 20} MiB -> {b >> 20} MiB", file=sys.stderr)
