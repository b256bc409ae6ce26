"""The runner's model-side object: a loaded model, its engine and batching loop, and the
request operations the HTTP layer exposes (see protocol.py)."""

from __future__ import annotations

import base64
import binascii
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engine.kvcache.types import KVCacheType
from ..engine.ml.api import DType
from ..engine.tokenizer import Tokenizer
from .loop import BatchLoop, PassEngine
from .protocol import (
    ENGINES,
    CompletionRequest,
    EngineKind,
    RunnerInfo,
    RunnerMemory,
    RunnerOptions,
)
from .sequence import PromptTooLongError, Sequence, SequenceSettings, settings_from_request

if TYPE_CHECKING:
    from ..engine.architecture import Architectures
    from ..engine.model import LoadedModel

__all__ = ["RunnerConfig", "Runner", "RequestError"]

_log = logging.getLogger("hearth.runner")


class RequestError(ValueError):
    """A request the runner refuses (HTTP 400); the message says why."""


@dataclass(frozen=True)
class RunnerConfig(RunnerOptions):
    """A runner's model and options (protocol.RunnerOptions), plus in-process choices."""

    model: str
    multi_user_cache: bool = False
    pipelined: bool | None = None  # build batch N+1 while N computes; None = when a core is spare


class Runner:
    """Loads the model (raising on failure) and serves requests through one BatchLoop."""

    def __init__(
        self,
        config: RunnerConfig,
        progress: Callable[[float], None] | None = None,
        registry: Architectures | None = None,
    ):
        """`registry`: the architectures to load with; None means the installed plugins'.
        `config.engine` picks Hearth's engine or llama.cpp's (the latter never loads
        Hearth's ggml in this process)."""
        if config.engine not in ENGINES:
            raise ValueError(f"unknown engine {config.engine!r}; use one of {', '.join(ENGINES)}")
        self.config = config
        self.loaded: LoadedModel | None = None
        self.invariance: Any = None
        self.engine: PassEngine
        pipelined = config.pipelined
        if config.engine == EngineKind.LLAMACPP:
            from ..engine.llamacpp import LlamaCppEngine
            from .layout_option import parse_layout

            compat = LlamaCppEngine(
                config.model,
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
            self.engine, self.memory = compat, compat.memory
            self.tokenizer: Tokenizer = compat.tokenizer
            self.architecture, self.context_length = compat.architecture, compat.context_length
            pipelined = False  # its cache must not change while llama_decode runs
        else:
            self._load_native(config, progress, registry)
        self.loop = BatchLoop(self.engine, multi_user=config.multi_user_cache, pipelined=pipelined)
        self.loop.start()
        self.constraints: Any = None  # grammar TokenTable, built on first structured request
        self._constraints_lock = threading.Lock()

    def _load_native(
        self,
        config: RunnerConfig,
        progress: Callable[[float], None] | None,
        registry: Architectures | None,
    ) -> None:
        from ..engine.forward import ForwardEngine
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
            config.model,
            registry=registry if registry is not None else default_registry(),
            projector=config.projector or None,
            progress=progress,
            num_threads=config.threads,
            flash_attention=config.flash_attention,
            placement=runner_placement(config.layout),
        )
        try:
            engine = ForwardEngine(
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
        self.loaded, self.engine, self.memory = loaded, engine, engine.memory
        # Probed while loading (ml/invariance.py): whether "same tokens under any load" holds.
        self.invariance = loaded.weights.invariance_report()
        log = _log.info if self.invariance.holds else _log.warning
        log("%s: %s", loaded.file.path.name, self.invariance.summary())
        self.tokenizer = loaded.tokenizer
        self.architecture = loaded.architecture
        self.context_length = loaded.file.metadata.uint("context_length", 0)

    # -- requests ---------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True) -> list[int]:
        """Tokenize a prompt: special tokens parsed, BOS per the file, never doubled."""
        tok = self.tokenizer
        ids = tok.encode(text, add_special=add_special, parse_special=True)
        if tok.bos_id is not None and len(ids) >= 2 and ids[0] == ids[1] == tok.bos_id:
            ids = ids[1:]
        return ids

    def completion(self, req: CompletionRequest) -> Sequence:
        """Validate and queue a generation; its `events` queue streams the protocol lines."""
        marks: list[int] | None = None
        if req.images:
            if req.tokens is not None or req.prompt is None:
                raise RequestError("images need a text prompt (with [img-N] markers or none)")
            prompt, marks = self._prompt_with_images(req.prompt, req.images)
        elif req.tokens is not None:
            if not all(
                isinstance(t, int) and 0 <= t < self.tokenizer.vocab_size for t in req.tokens
            ):
                raise RequestError("tokens must be ids inside the model's vocabulary")
            prompt = list(req.tokens)
        elif req.prompt is not None:
            prompt = self.encode(req.prompt)
        else:
            raise RequestError("give a prompt or tokens")
        try:
            settings = settings_from_request(req)
            constraint = self._constraint(req.format)
            seq = Sequence(
                prompt,
                settings,
                self.tokenizer,
                self.engine.num_ctx,
                constraint=constraint,
                same_batch=marks,
            )
        except (PromptTooLongError, ValueError) as e:
            raise RequestError(str(e)) from None
        self.loop.submit(seq)
        return seq

    def _prompt_with_images(self, text: str, images: list[str]) -> tuple[list[int], list[int]]:
        """(inputs, same_batch marks) of a prompt with images: Hearth's plugin lays them out,
        or on the llama.cpp engine its mtmd (`engine.vision`, present with a projector)."""
        engine = self.engine
        vision = getattr(engine, "vision", None)
        handles = self.loaded.model.handles_multimodal() if self.loaded is not None else True
        if not handles or not vision:
            raise RequestError(
                f"this model ({self.architecture}) cannot see images; "
                "use a vision model (with its projector file) or send text only"
            )
        data = []
        for i, item in enumerate(images):
            try:
                data.append(base64.b64decode(item, validate=True))
            except (binascii.Error, ValueError):
                raise RequestError(f"image {i} is not valid base64") from None
        try:
            if self.loaded is None:  # llama.cpp's engine: mtmd tokenizes and encodes
                return vision.prompt(text, data, self.tokenizer.bos_id)  # type: ignore[no-any-return]
            from .prompt_inputs import build_prompt  # Hearth's engine only (it loads ggml)

            model = self.loaded.model
            return build_prompt(text, data, model, engine, self.encode)  # type: ignore[arg-type]
        except ValueError as e:
            raise RequestError(str(e)) from None

    def _constraint(self, fmt: Any) -> Any:
        if fmt in (None, ""):
            return None
        from ..engine.grammar import JsonConstraint, TokenTable, schema_from_format

        schema = schema_from_format(fmt)
        with self._constraints_lock:  # built once per model, on first use (about a second)
            if self.constraints is None:
                self.constraints = TokenTable.from_tokenizer(self.tokenizer)
        return JsonConstraint(self.constraints, schema)

    def embedding(self, text: str | list[int], truncate: bool = True) -> Sequence:
        ids = list(text) if isinstance(text, list) else self.encode(text)
        if not ids:
            raise RequestError("the input is empty")
        limit = self.engine.num_ctx
        if len(ids) > limit:
            if not truncate:
                raise RequestError(
                    f"the input is {len(ids)} tokens but the context holds {limit}; "
                    "shorten it or allow truncation"
                )
            ids = ids[:limit]
        seq = Sequence(ids, SequenceSettings(), self.tokenizer, self.engine.num_ctx, embedding=True)
        self.loop.submit(seq)
        return seq

    def tokenize(self, content: str, add_special: bool = True) -> list[int]:
        return self.encode(content, add_special)

    def detokenize(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens)

    def info(self) -> RunnerInfo:
        mem = self.memory
        return RunnerInfo(
            architecture=self.architecture,
            engine=EngineKind(self.config.engine),
            context_length=self.context_length,
            num_ctx=self.engine.num_ctx,
            parallel=self.engine.parallel,
            vocab_size=self.tokenizer.vocab_size,
            memory=RunnerMemory(
                weights=mem.weights, cache=mem.cache, graph=mem.graph, total=mem.total
            ),
            devices=self._device_memory(),
            batch_invariance=self.invariance.to_json() if self.invariance else None,
        )

    def _device_memory(self) -> dict[str, dict[str, int]]:
        """Bytes per device (the llama.cpp engine: the buffers its log reported)."""
        if self.loaded is None:
            return dict(getattr(self.engine, "devices", {}))
        from .layout_option import device_memory

        return device_memory(self.loaded, self.engine)  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.stop()
        self.engine.close()
        if self.loaded is not None:
            self.loaded.close()
