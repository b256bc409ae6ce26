"""The engine a runner serves with: one interface over Hearth's engine and llama.cpp's.

`load_engine(model, options)` is the only place that knows the two kinds (`options.engine`,
`protocol.EngineKind`); everything else in the runner (requests in core.py, batching in
loop.py) holds a `RunnerEngine` and never asks which one it is.

A `RunnerEngine` is:

* passes: `plan(PassInput)` / `run(planned)` / `forward(PassInput)` over a per-sequence KV
  cache (`cache`, which the prompt cache edits), and `replaces_state` (an input whose item
  replaces its sequence's encoder state must start a pass); `pooling` says how the loop pools
  hidden states into an embedding. These come from the engine library (`Passes`).
* prompts: `encode` (BOS per the file, never doubled) and `prompt(text, images)`, the inputs
  of a prompt with images and their same-batch marks, or the "cannot see images" refusal.
* what `/info` reports: `memory` (totals), `devices()` (bytes per device and part),
  `invariance` (the batch-invariance report, None where not probed) and `speculation_off`
  (why speculative decoding is off, None where drafts are checked exactly).
* the prompt cache on disk: `disk_cache_key(options)`, what keys its files besides the model
  file's digest (disk_cache.py), None where the engine keeps its cache to itself.
* whether the loop may plan pass N+1 while pass N computes (`can_pipeline`), and whether that
  pays here (`spare_core`).
* `close()`, which frees everything it loaded.

Hearth's own engine (`HearthEngine`: `ForwardEngine` over a `LoadedModel` and an architecture
plugin) and llama.cpp's (`LlamaCppRunnerEngine`: `hearth.llamacpp.LlamaCppEngine`)
implement it. Each imports its engine only when loaded: one process holds either Hearth's
ggml or llama.cpp's, never both.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .. import env
from ..engine.input import PassInput
from ..engine.memory_use import MemoryUse
from ..engine.tokenizer import Tokenizer
from .protocol import ENGINES, EngineKind, RunnerOptions

if TYPE_CHECKING:
    from ..engine.architecture import Architectures
    from ..engine.forward import ForwardEngine
    from ..engine.ml.invariance import InvarianceReport
    from ..engine.model import LoadedModel
    from ..llamacpp import LlamaCppEngine

__all__ = [
    "PassInput",
    "Passes",
    "RunnerEngine",
    "HearthEngine",
    "LlamaCppRunnerEngine",
    "load_engine",
    "load_draft_engine",
    "load_errors",
]

_log = logging.getLogger("hearth.runner")


class Passes(Protocol):
    """What the engine library gives for passes (`ForwardEngine`, `LlamaCppEngine`): `plan()`
    returns a pass whose `tokens` array may still change before `run()` (tokens being
    sampled); `run()` returns `[outputs, vocab]` logits, or hidden states for a
    `PassInput.hidden` pass."""

    num_ctx: int
    num_batch: int
    parallel: int
    pooling: str
    memory: MemoryUse

    @property
    def cache(self) -> Any: ...

    def plan(self, inputs: PassInput) -> Any: ...

    def run(self, planned: Any, on_started: Callable[[], None] | None = None) -> np.ndarray: ...

    def forward(self, inputs: PassInput) -> np.ndarray: ...

    def replaces_state(self, token: int) -> bool: ...

    def close(self) -> None: ...


class RunnerEngine(ABC):
    """See the module docstring. `native` does the passes; a subclass adds what its engine
    knows of prompts, devices and invariance, and what it loaded besides `native`."""

    def __init__(
        self, native: Passes, tokenizer: Tokenizer, architecture: str, context_length: int
    ) -> None:
        self.native = native
        self.tokenizer = tokenizer
        self.architecture = architecture
        self.context_length = context_length  # the file's training context (0: not given)
        self.num_ctx = native.num_ctx
        self.num_batch = native.num_batch
        self.parallel = native.parallel
        self.pooling = native.pooling  # "mean", "first" or "last"
        self.memory: MemoryUse = native.memory

    # -- passes ---------------------------------------------------------------------------
    @property
    def cache(self) -> Any:
        """The per-sequence KV cache the prompt cache (`InputCache`) edits."""
        return self.native.cache

    def plan(self, inputs: PassInput) -> Any:
        return self.native.plan(inputs)

    def run(self, planned: Any, on_started: Callable[[], None] | None = None) -> np.ndarray:
        return self.native.run(planned, on_started=on_started)

    def forward(self, inputs: PassInput) -> np.ndarray:
        return self.native.forward(inputs)

    def replaces_state(self, token: int) -> bool:
        return self.native.replaces_state(token)

    @property
    @abstractmethod
    def can_pipeline(self) -> bool:
        """Whether `plan()` may run while an earlier pass computes."""

    @property
    @abstractmethod
    def spare_core(self) -> bool:
        """Whether a CPU core is left over by the compute threads (pipelining pays)."""

    # -- prompts --------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True) -> list[int]:
        """Tokenize a prompt: special tokens parsed, BOS per the file, never doubled."""
        tok = self.tokenizer
        ids = tok.encode(text, add_special=add_special, parse_special=True)
        if tok.bos_id is not None and len(ids) >= 2 and ids[0] == ids[1] == tok.bos_id:
            ids = ids[1:]
        return ids

    def prompt(self, text: str, images: list[bytes]) -> tuple[list[int], list[int]]:
        """(inputs, same_batch marks) of `text` with `images` (`[img-N]` markers; none: the
        images first). Negative inputs are image placeholders. ValueError with a sentence
        for a model that cannot see images, a bad marker or an unreadable image."""
        if not self.sees_images:
            raise ValueError(
                f"this model ({self.architecture}) cannot see images; "
                "use a vision model (with its projector file) or send text only"
            )
        return self._lay_out(text, images)

    @property
    @abstractmethod
    def sees_images(self) -> bool:
        """Whether this model, as loaded (with its projector), takes images."""

    @abstractmethod
    def _lay_out(self, text: str, images: list[bytes]) -> tuple[list[int], list[int]]:
        """`prompt()` for an engine that sees images."""

    # -- memory and devices ---------------------------------------------------------------
    @abstractmethod
    def devices(self) -> dict[str, dict[str, int]]:
        """Bytes of weights, KV cache and graph buffers per device."""

    @property
    @abstractmethod
    def invariance(self) -> InvarianceReport | None:
        """Whether "same tokens under any load" holds here (None: not probed)."""

    @property
    def speculation_off(self) -> str | None:
        """Why the loop does not draft tokens (a sentence), or None where it may: where a
        pass's rows, each computed as a lone row (`PassInput.lone_rows`), give exactly the
        logits of decoding one token at a time. An engine says so itself (default: off)."""
        return "this engine does not check drafted tokens"

    def disk_cache_key(self, options: RunnerOptions) -> dict[str, Any] | None:
        """What keys the prompt cache's files on disk (disk_cache.py) besides the model
        file's digest: everything that changes the cached bits or where they sit, loaded with
        `options`. None where the prompt cache on disk does not apply (default)."""
        return None

    def close(self) -> None:
        self.native.close()


class HearthEngine(RunnerEngine):
    """Hearth's own engine: a `ForwardEngine` over a model loaded with its plugin."""

    def __init__(self, loaded: LoadedModel, native: ForwardEngine) -> None:
        super().__init__(
            native,
            loaded.tokenizer,
            loaded.architecture,
            loaded.file.metadata.uint("context_length", 0),
        )
        self.loaded = loaded
        self.native: ForwardEngine = native
        # Probed while loading (ml/invariance.py).
        self._invariance = loaded.weights.invariance_report()

    @classmethod
    def load(
        cls,
        model: str,
        config: RunnerOptions,
        progress: Callable[[float], None] | None = None,
        registry: Architectures | None = None,
    ) -> HearthEngine:
        from ..engine.forward import ForwardEngine
        from ..engine.kvcache.types import KVCacheType
        from ..engine.ml.tensor import DType
        from ..engine.model import load_model
        from ..plugins.registry import default_registry
        from .layout_option import runner_placement

        kv = KVCacheType(config.kv_type).dtype
        if kv != DType.F16 and not config.flash_attention:
            raise ValueError(
                f"a {config.kv_type} KV cache needs flash attention (--flash-attention); "
                "without it the cache is f16"
            )
        loaded = load_model(
            model,
            registry=registry if registry is not None else default_registry(),
            projector=config.projector or None,
            progress=progress,
            num_threads=config.threads,
            flash_attention=config.flash_attention,
            placement=runner_placement(config.layout),
        )
        try:
            native = ForwardEngine(
                loaded,
                num_ctx=config.num_ctx,
                num_batch=config.num_batch,
                parallel=config.parallel,
                kv_dtype=kv,
                memory_limit=config.memory_limit,
            )
        except BaseException:
            loaded.close()
            raise
        engine = cls(loaded, native)
        report = engine._invariance
        log = _log.info if report.holds else _log.warning
        log("%s: %s", loaded.file.path.name, report.summary())
        return engine

    @property
    def can_pipeline(self) -> bool:
        return True

    @property
    def spare_core(self) -> bool:
        return (os.cpu_count() or 1) > self.loaded.backend.num_threads

    @property
    def sees_images(self) -> bool:
        return self.loaded.model.handles_multimodal() and self.native.vision is not None

    def _lay_out(self, text: str, images: list[bytes]) -> tuple[list[int], list[int]]:
        from .prompt_inputs import build_prompt

        return build_prompt(text, images, self.loaded.model, self.native, self.encode)

    def devices(self) -> dict[str, dict[str, int]]:
        from .layout_option import device_memory

        return device_memory(self.loaded, self.native)

    @property
    def invariance(self) -> InvarianceReport:
        return self._invariance

    @property
    def speculation_off(self) -> str | None:
        report = self._invariance
        if report.holds:
            return None
        return f"drafts cannot be checked exactly: {report.summary()}"

    def disk_cache_key(self, options: RunnerOptions) -> dict[str, Any]:
        backend = self.loaded.backend
        return {
            "engine": "hearth",
            "architecture": self.architecture,
            "kv_type": str(options.kv_type),
            "flash_attention": bool(options.flash_attention),
            "kv_padding": int(getattr(backend, "kv_padding", 0)),
            "num_ctx": self.num_ctx,
            "num_batch": self.num_batch,
            "threads": int(backend.num_threads),
            "cpu_kernels": env.cpu_kernels().value,
            "layout": options.layout or "",
            "rpc": env.text("HEARTH_RPC_SERVERS"),
        }

    def close(self) -> None:
        super().close()
        self.loaded.close()


class LlamaCppRunnerEngine(RunnerEngine):
    """llama.cpp's engine (files no Hearth plugin registers); its mtmd sees the images."""

    def __init__(self, native: LlamaCppEngine) -> None:
        super().__init__(native, native.tokenizer, native.architecture, native.context_length)
        self.native: LlamaCppEngine = native

    @classmethod
    def load(
        cls, model: str, config: RunnerOptions, progress: Callable[[float], None] | None = None
    ) -> LlamaCppRunnerEngine:
        from ..llamacpp import LlamaCppEngine
        from .layout_option import parse_layout

        return cls(
            LlamaCppEngine(
                model,
                num_ctx=config.num_ctx,
                num_batch=config.num_batch,
                parallel=config.parallel,
                threads=config.threads,
                flash_attention=config.flash_attention,
                kv_type=config.kv_type,
                memory_limit=config.memory_limit,
                progress=progress,
                projector=config.projector or None,
                placement=parse_layout(config.layout),
            )
        )

    @property
    def can_pipeline(self) -> bool:
        return False  # its cache must not change while llama_decode runs

    @property
    def spare_core(self) -> bool:
        return False

    @property
    def sees_images(self) -> bool:
        return self.native.vision is not None

    def _lay_out(self, text: str, images: list[bytes]) -> tuple[list[int], list[int]]:
        vision = self.native.vision
        assert vision is not None
        return vision.prompt(text, images, self.tokenizer.bos_id)

    def devices(self) -> dict[str, dict[str, int]]:
        """The buffers llama.cpp's log reported."""
        return dict(self.native.devices)

    @property
    def invariance(self) -> None:
        return None  # llama.cpp's kernels are not probed

    @property
    def speculation_off(self) -> str:
        return "not supported on the llama.cpp engine"


def load_engine(
    model: str,
    options: RunnerOptions,
    progress: Callable[[float], None] | None = None,
    registry: Architectures | None = None,
) -> RunnerEngine:
    """GGUF file `model` loaded on the engine `options.engine` names, with `options`
    (raising on failure: see `load_errors`). `registry`: the architectures Hearth's engine
    loads with; None means the installed plugins'. llama.cpp's engine never loads Hearth's
    ggml in this process."""
    if options.engine not in ENGINES:
        raise ValueError(f"unknown engine {options.engine!r}; use one of {', '.join(ENGINES)}")
    if options.engine == EngineKind.LLAMACPP:
        return LlamaCppRunnerEngine.load(model, options, progress)
    return HearthEngine.load(model, options, progress, registry)


def load_draft_engine(
    model: str, options: RunnerOptions, registry: Architectures | None = None
) -> RunnerEngine:
    """A draft model (speculative decoding, draft_model.py) for a runner started with
    `options`: GGUF file `model` on Hearth's engine, with the runner's context, slots and
    threads, text only, on the CPU."""
    draft = replace(options, engine=EngineKind.HEARTH, projector=None, layout=None)
    return HearthEngine.load(model, draft, None, registry)


def load_errors(kind: str) -> tuple[type[Exception], ...]:
    """Engine `kind`'s "this file cannot be run" errors, imported only for that engine (one
    process holds either Hearth's ggml or llama.cpp's)."""
    if kind == EngineKind.LLAMACPP:
        from ..llamacpp import LlamaCppLoadError

        return (LlamaCppLoadError,)
    from ..engine.model import ModelLoadError

    return (ModelLoadError,)
