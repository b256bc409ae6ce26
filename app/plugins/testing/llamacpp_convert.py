"""llama.cpp's own Hugging Face -> GGUF converter, for tests that compare with llama.cpp's files.

`llamacpp_converter()` fetches `convert_hf_to_gguf.py` (with its `conversion/` and `gguf-py/`)
from llama-cpp-python's source distribution (`LLAMACPP_VERSION`) once and keeps it under the
environment's prefix; `run_llamacpp_converter(converter, hf_dir, out, mmproj)` runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from ... import env as hearth_env

__all__ = [
    "LLAMACPP_VERSION",
    "ConverterUnavailableError",
    "llamacpp_converter",
    "run_llamacpp_converter",
]

LLAMACPP_VERSION = "0.3.36"  # llama-cpp-python, whose sdist carries llama.cpp's converter
_SDIST_ROOT = f"llama_cpp_python-{LLAMACPP_VERSION}/vendor/llama.cpp/"
_CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/", "LICENSE")


class ConverterUnavailableError(RuntimeError):
    """llama.cpp's converter could not be fetched (no network, no pip)."""


def llamacpp_converter(cache: Path | None = None) -> Path:
    """The folder holding llama.cpp's `convert_hf_to_gguf.py`, `conversion/` and `gguf-py/`
    (from llama-cpp-python's sdist, `LLAMACPP_VERSION`). Fetched with pip the first time and
    kept in `cache` (default: `$HEARTH_LLAMACPP_CONVERT`, else `llama.cpp-convert/` in the
    Python environment's prefix, i.e. `.venv/`). Raises ConverterUnavailableError when pip
    cannot fetch it."""
    env = hearth_env.text("HEARTH_LLAMACPP_CONVERT") or None
    root = cache or (Path(env) if env else Path(sys.prefix) / "llama.cpp-convert")
    if _converter_complete(root):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".llama.cpp-convert-", dir=root.parent))
    try:
        spec = f"llama-cpp-python=={LLAMACPP_VERSION}"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        proc = subprocess.run(
            [*cmd, spec, "-d", str(work / "sdist"), "--quiet"], capture_output=True, text=True
        )
        archives = sorted((work / "sdist").glob("*.tar.gz"))
        if proc.returncode != 0 or not archives:
            raise ConverterUnavailableError(
                f"pip could not download the {spec} source distribution, which carries "
                f"llama.cpp's converter: {(proc.stderr or proc.stdout).strip()[-500:]}"
            )
        out = work / "out"
        with tarfile.open(archives[0]) as tar:
            members = []
            for m in tar.getmembers():
                if not m.name.startswith(_SDIST_ROOT) or not (m.isfile() or m.isdir()):
                    continue
                rel = m.name[len(_SDIST_ROOT) :]
                if any(
                    rel == p or (p.endswith("/") and rel.startswith(p)) for p in _CONVERTER_PARTS
                ):
                    m.name = rel
                    members.append(m)
            tar.extractall(out, members=members, filter="data")
        if not _converter_complete(out):
            raise ConverterUnavailableError(f"{archives[0].name} lacks llama.cpp's converter")
        try:
            out.rename(root)
        except OSError:  # another process got there first
            if not _converter_complete(root):
                raise
        return root
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _converter_complete(root: Path) -> bool:
    return (
        (root / "convert_hf_to_gguf.py").is_file()
        and (root / "conversion" / "__init__.py").is_file()
        and (root / "gguf-py" / "gguf" / "__init__.py").is_file()
    )


def run_llamacpp_converter(converter: Path, hf_dir: Path, out: Path, mmproj: bool) -> None:
    """Convert the Hugging Face folder `hf_dir` to `out` with llama.cpp's converter (the folder
    `llamacpp_converter()` gives), F32; `mmproj`: the projector file instead of the text model.
    Raises RuntimeError with the converter's output when it fails."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(converter / "gguf-py"), *filter(None, [env.get("PYTHONPATH")])]
    )
    args = [sys.executable, str(converter / "convert_hf_to_gguf.py"), str(hf_dir)]
    args += ["--outfile", str(out), "--outtype", "f32", *(["--mmproj"] if mmproj else [])]
    proc = subprocess.run(args, capture_output=True, text=True, env=env)
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(
            f"convert_hf_to_gguf.py{' --mmproj' if mmproj else ''} failed:\n"
            + (proc.stderr or proc.stdout)[-3000:]
        )
