"""The runner's model-side object: a loaded model, its engine and batching loop, and the
request operations the HTTP layer exposes (see protocol/)."""

from __future__ import annotations

import base64
import binascii
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engine.memory_use import MemoryUse
from ..engine.tokenizer import Tokenizer
from .disk_cache import PromptCache
from .draft_model import DraftModel
from .engine import RunnerEngine, load_draft_engine, load_engine
from .loop import BatchLoop
from .protocol import CompletionRequest, RunnerInfo, RunnerMemory, RunnerOptions
from .sequence import PromptTooLongError, Sequence, SequenceSettings, settings_from_request
from .speculation import Speculator

if TYPE_CHECKING:
    from ..engine.architecture import Architectures

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
    # Drafting switches itself off where measured passes say it does not pay (draft_cost.py);
    # False drafts whatever it costs (tests of exactness).
    weigh_drafts: bool = True
    # The prompt cache on disk (disk_cache.py): its folder (None: off) and size cap in bytes.
    prompt_cache_dir: str | None = None
    prompt_cache_bytes: int = 0


class Runner:
    """Loads the model (raising on failure) and serves requests through one BatchLoop."""

    def __init__(
        self,
        config: RunnerConfig,
        progress: Callable[[float], None] | None = None,
        registry: Architectures | None = None,
    ):
        """`registry`: the architectures to load with; None means the installed plugins'.
        `config.engine` picks the engine (see engine.py: `load_engine`)."""
        self.config = config
        self.engine: RunnerEngine = load_engine(config.model, config, progress, registry)
        try:
            self.draft_model = self._load_draft_model(registry)
        except BaseException:
            self.engine.close()
            raise
        self.memory = self.engine.memory
        if self.draft_model is not None:  # its weights, cache and graph count too
            extra = self.draft_model.engine.memory
            self.memory = MemoryUse(
                self.memory.weights + extra.weights,
                self.memory.cache + extra.cache,
                self.memory.graph + extra.graph,
            )
        self.invariance = self.engine.invariance
        self.tokenizer: Tokenizer = self.engine.tokenizer
        self.architecture = self.engine.architecture
        self.context_length = self.engine.context_length
        # A file of the model store names its digest: the prompt cache's disk is attached
        # before the first request. Another file is read whole for its digest, beside serving.
        self.prompt_cache = PromptCache(
            self.engine,
            config.model,
            config,
            multi_user=config.multi_user_cache,
            folder=config.prompt_cache_dir,
            cap_bytes=config.prompt_cache_bytes,
        )
        self.speculator = Speculator(self.engine, self.draft_model, weigh=config.weigh_drafts)
        self.loop = BatchLoop(
            self.engine, self.prompt_cache.slots, config.pipelined, self.speculator
        )
        self.loop.start()
        self.constraints: Any = None  # grammar TokenTable, built on first structured request
        self._constraints_lock = threading.Lock()

    def _load_draft_model(self, registry: Architectures | None) -> DraftModel | None:
        """The draft model `config.draft_model` names, on Hearth's engine with the model's
        context and slots (None when none is named, or where speculation is off: it would
        never draft)."""
        path = self.config.draft_model
        if not path or self.engine.speculation_off is not None:
            return None
        engine = load_draft_engine(path, self.config, registry)
        try:
            return DraftModel(engine, self.engine.tokenizer)
        except BaseException:
            engine.close()
            raise

    # -- requests ---------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True) -> list[int]:
        """Tokenize a prompt: special tokens parsed, BOS per the file, never doubled."""
        return self.engine.encode(text, add_special)

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
        """(inputs, same_batch marks) of a prompt with base64 `images` (`engine.prompt`)."""
        data = []
        for i, item in enumerate(images):
            try:
                data.append(base64.b64decode(item, validate=True))
            except (binascii.Error, ValueError):
                raise RequestError(f"image {i} is not valid base64") from None
        try:
            return self.engine.prompt(text, data)
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
            engine=self.config.engine,
            context_length=self.context_length,
            num_ctx=self.engine.num_ctx,
            parallel=self.engine.parallel,
            vocab_size=self.tokenizer.vocab_size,
            memory=RunnerMemory(
                weights=mem.weights, cache=mem.cache, graph=mem.graph, total=mem.total
            ),
            devices=self.engine.devices(),
            batch_invariance=self.invariance.to_json() if self.invariance else None,
            speculation=self.speculation(),
        )

    def passes(self) -> int:
        """Model passes the loop has run for completions since the model loaded."""
        return self.loop.steps

    def busy_slots(self) -> int:
        """Slots a sequence holds now: generating, evaluating its prompt or embedding (read
        from another thread than the loop's: a snapshot)."""
        return sum(1 for slot in self.prompt_cache.slots.slots if slot.in_use)

    def speculation(self) -> dict[str, Any]:
        """Whether generations draft tokens (speculative decoding) and, if not, why."""
        off = self.speculator.off
        if off is not None:
            return {"enabled": False, "reason": off}
        return {"enabled": True, "drafts": self.speculator.drafter.name}

    def close(self) -> None:
        """Stop serving; the prompt cache on disk saves every slot (within a few seconds:
        the service kills a runner that takes longer to stop), then the model is freed."""
        self.loop.stop()
        self.speculator.close()
        self.prompt_cache.close()
        self.engine.close()
