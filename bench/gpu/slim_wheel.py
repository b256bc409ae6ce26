"""Drop the second copy of the shared libraries that ggml-python's and llama-cpp-python's wheels
carry: scikit-build installs each library both into the package (`ggml/lib/`, `llama_cpp/lib/`,
where the package loads it from) and into a top-level `lib/` that nothing loads. With CUDA the
copy is most of the wheel (libggml-cuda.so is about 33 MB for one architecture), and the GPU
machine's calls carry at most 64 MiB.

    python bench/gpu/slim_wheel.py WHEEL...      rewrites each wheel in place

A top-level `lib/X` is dropped only when the wheel also has `<package>/lib/X` with the same
bytes; RECORD loses its lines. Prints the sizes before and after.
"""

from __future__ import annotations

import hashlib
import sys
import zipfile
from pathlib import Path


def slim(wheel: Path) -> tuple[int, int]:
    before = wheel.stat().st_size
    with zipfile.ZipFile(wheel) as z:
        entries = {i.filename: z.read(i) for i in z.infolist()}
        infos = {i.filename: i for i in z.infolist()}
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
    if not drop:
        return before, before
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in entries.items():
            if name in drop:
                continue
            if name.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = "".join(f"{ln}\n" for ln in lines if ln.split(",")[0] not in drop).encode()
            out.writestr(infos[name], data, compress_type=zipfile.ZIP_DEFLATED)
    tmp.replace(wheel)
    return before, wheel.stat().st_size


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        a, b = slim(Path(arg))
        print(f"slim_wheel: {Path(arg).name}: {a >> 20} MiB -> {b >> 20} MiB", file=sys.stderr)
