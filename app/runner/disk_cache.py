"""The runner's prompt cache: the slots of its engine's KV cache (`hearth.engine.prompt_cache`)
and, where it applies, their files on disk (`hearth.engine.disk_prompt_cache`), built together
(`PromptCache`).

The disk applies where the engine keys its files (`RunnerEngine.disk_cache_key`: Hearth's own
engine; llama.cpp's keeps its cache to itself), with HEARTH_PROMPT_CACHE_SIZE above 0. Files
live under `<data dir>/prompt-cache` (`hearth.paths.prompt_cache_dir`). The key holds
everything that changes the cached bits or where they sit: the model file's sha256 (read from
the store's blob name `sha256-<hex>`, else computed from the file) and what the engine says
(the architecture, K/V type, flash attention, the KV padding, num_ctx, num_batch, threads, the
CPU kernels setting, the device layout and RPC workers); the cache adds the format version and
Hearth's and ggml's versions (`software_versions`). What is saved: a sequence's prefix before
its first image (an image's positions, and mllama's cross-attention state, never are). A cache
that cannot save a sequence (a plugin's own cache class, a slot sharing another's cells in
multi-user mode) simply saves nothing.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from pathlib import Path
from typing import Any

from ..engine.disk_prompt_cache import DiskPromptCache
from ..engine.prompt_cache import InputCache
from .engine import RunnerEngine
from .protocol import RunnerOptions

__all__ = ["PromptCache", "model_digest", "named_digest"]

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


class PromptCache:
    """The slots of `engine`'s KV cache (`slots`, what the batching loop acquires and
    releases) and their files on disk (`disk`, None where off), attached once the model
    file's digest is known: at once when the file's store name says it, else by a thread
    that reads the file beside serving. `ready` is set once the disk is attached or known
    to be off."""

    def __init__(
        self,
        engine: RunnerEngine,
        model: str,
        options: RunnerOptions,
        multi_user: bool = False,
        folder: str | None = None,
        cap_bytes: int = 0,
    ) -> None:
        """`model`: the GGUF file `engine` loaded with `options`. `folder` (None: no disk)
        and `cap_bytes` (0: no disk): the files' place and size cap."""
        self.slots = InputCache(engine.cache, engine.parallel, engine.num_ctx, multi_user)
        self.disk: DiskPromptCache | None = None
        self.ready = threading.Event()
        key = engine.disk_cache_key(options) if folder and cap_bytes > 0 else None
        if folder is None or key is None:
            if folder and cap_bytes > 0:
                _log.info("prompt cache on disk: not kept for the %s engine", options.engine)
            self.ready.set()
            return
        if named_digest(model) is not None:
            self._attach(model, key, folder, cap_bytes)
        else:
            attach = threading.Thread(
                target=self._attach,
                args=(model, key, folder, cap_bytes),
                name="prompt-cache",
                daemon=True,
            )
            attach.start()

    def _attach(self, model: str, key: dict[str, Any], folder: str, cap_bytes: int) -> None:
        try:
            settings = {"model": model_digest(model), **key}
            self.disk = self.slots.disk = DiskPromptCache(Path(folder), settings, cap_bytes)
        except OSError as e:
            _log.warning("prompt cache on disk is off: %s", e)
        finally:
            self.ready.set()

    def close(self) -> None:
        """Queue every slot's content for the disk and finish writing (the model is
        unloading; the loop must have stopped)."""
        disk = self.disk
        if disk is not None:
            self.slots.save_all()
            disk.close()
