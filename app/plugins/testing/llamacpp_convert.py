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


def run_llamacpp_converter(
    converter: Path, hf_dir: Path, out: Path, mmproj: bool, *, bpe_pre: str | None = None
) -> None:
    """Convert the Hugging Face folder `hf_dir` to `out` with llama.cpp's converter (the folder
    `llamacpp_converter()` gives), F32; `mmproj`: the projector file instead of the text model.
    `bpe_pre`: the pre-tokenizer name to write for a byte-level BPE `tokenizer.json` trained
    by a test (llama.cpp recognises a pre-tokenizer by hashing how real models' tokenizers
    split a text, which no test tokenizer matches; e.g. "gpt-4o" for gpt-oss); everything
    else is the converter's own. Raises RuntimeError with the converter's output when it
    fails."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(converter), str(converter / "gguf-py"), *filter(None, [env.get("PYTHONPATH")])]
    )
    script = str(converter / "convert_hf_to_gguf.py")
    args = [str(hf_dir), "--outfile", str(out), "--outtype", "f32"]
    args += ["--mmproj"] if mmproj else []
    if bpe_pre is None:
        cmd = [sys.executable, script, *args]
    else:
        cmd = [sys.executable, "-c", _WITH_PRE, script, bpe_pre, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(
            f"convert_hf_to_gguf.py{' --mmproj' if mmproj else ''} failed:\n"
            + (proc.stderr or proc.stdout)[-3000:]
        )


# Runs the converter with its pre-tokenizer lookup answering argv[2] (see run_llamacpp_converter).
_WITH_PRE = """
import runpy, sys
import conversion.base as base
script, pre = sys.argv[1], sys.argv[2]
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = [script, *sys.argv[3:]]
runpy.run_path(script, run_name="__main__")
"""
