"""The runner's prompt cache on disk (`hearth.engine.disk_prompt_cache`): whether it applies to
this model, and the settings that key its files.

It applies to Hearth's own engine only (llama.cpp's engine keeps its cache to itself), with
HEARTH_PROMPT_CACHE_SIZE above 0. Files live under `<data dir>/prompt-cache`
(`hearth.paths.prompt_cache_dir`). The key holds everything that changes the cached bits or
where they sit: the model file's sha256 (read from the store's blob name `sha256-<hex>`,
else computed from the file), the architecture, K/V type, flash attention, the KV padding,
num_ctx, num_batch, threads, the CPU kernels setting, the device layout and RPC workers;
the cache adds the format version and Hearth's and ggml's versions (`software_versions`).
What is saved: a sequence's prefix before its first image (an image's positions, and
mllama's cross-attention state, never are). A cache that cannot save a sequence (a plugin's
own cache class, a slot sharing another's cells in multi-user mode) simply saves nothing.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path
from typing import Any

from .. import env
from ..engine.disk_prompt_cache import DiskPromptCache
from .engine import HearthEngine, RunnerEngine
from .protocol import RunnerOptions

__all__ = ["open_disk_cache", "model_digest", "named_digest", "cache_settings"]

_log = logging.getLogger("hearth.runner")
_BLOB = re.compile(r"sha256-([0-9a-f]{64})")


def named_digest(path: str | Path) -> str | None:
    """The sha256 (hex) a model store's blob name (`sha256-<hex>`) gives, else None."""
    m = _BLOB.fullmatch(Path(path).name)
    return m.group(1) if m else None


def model_digest(path: str | Path) -> str:
    """The model file's sha256 (hex): the store's blob name says it; otherwise it is
    computed (a file outside the store: slow for a large one)."""
    named = named_digest(path)
    if named is not None:
        return named
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def cache_settings(options: RunnerOptions, engine: HearthEngine, digest: str) -> dict[str, Any]:
    """What keys the files (module docstring)."""
    backend = engine.loaded.backend
    return {
        "model": digest,
        "engine": "hearth",
        "architecture": engine.architecture,
        "kv_type": str(options.kv_type),
        "flash_attention": bool(options.flash_attention),
        "kv_padding": int(getattr(backend, "kv_padding", 0)),
        "num_ctx": engine.num_ctx,
        "num_batch": engine.num_batch,
        "threads": int(backend.num_threads),
        "cpu_kernels": env.cpu_kernels().value,
        "layout": options.layout or "",
        "rpc": env.text("HEARTH_RPC_SERVERS"),
    }


def open_disk_cache(
    model: str, options: RunnerOptions, engine: RunnerEngine, folder: str, cap_bytes: int
) -> DiskPromptCache | None:
    """The disk cache for this runner, or None where it does not apply (said in the log).
    Reads the whole model file when its digest is not in its name: call it off the batch
    thread."""
    if cap_bytes <= 0:
        return None
    if not isinstance(engine, HearthEngine):
        _log.info("prompt cache on disk: not kept for the %s engine", options.engine)
        return None
    try:
        digest = model_digest(model)
        return DiskPromptCache(Path(folder), cache_settings(options, engine, digest), cap_bytes)
    except OSError as e:
        _log.warning("prompt cache on disk is off: %s", e)
        return None
