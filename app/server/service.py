"""The service's shared state and the steps every API route takes: resolve the model, merge
its parameters with the request's options, pick runner settings, and run a completion on a
leased runner (`Generation`, generation.py, re-exported here with `Piece` and `pieces`). The
Ollama and OpenAI route modules only translate formats.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..engine.gguf import GGUFError
from ..options import LoadOptions, default
from ..runner.protocol import (
    CompletionOptions,
    CompletionRequest,
    EngineKind,
    KVCacheType,
    from_wire,
)
from .config import ConfigError, ServerConfig, parse_duration
from .errors import ModelFailed, ModelFileMissing, RequestError
from .generation import Generation, Piece, pieces
from .prompting.fenced import tool_schemas
from .prompting.harmony import HarmonyParser, is_harmony
from .prompting.images import check_image
from .prompting.outputs import OutputParser
from .prompting.toolformats import (
    THINK_TAGS,
    ThinkingMarkers,
    ToolCallFormat,
    detect_thinking_markers,
    detect_tool_format,
)
from .request_types import RUNTIME_OPTIONS, ChatMessage, Options
from .scheduling.layout import LayoutOptions, MemoryReport
from .scheduling.layout.fit import fit_report, read_file_layers
from .scheduling.records import Lease, LoadSpec
from .scheduling.runner_process import RunnerCrashed, RunnerError, RunnerOptions
from .scheduling.scheduler import Scheduler
from .store.engines import EngineChoice, EngineUnavailableError, choose_engine
from .store.model_store import ModelNotFound, ModelRecord, ModelStore
from .store.modelinfo import ModelInfo, ModelInfoCache, capabilities

__all__ = [
    "Service",
    "Target",
    "GenerationSettings",
    "Generation",
    "Piece",
    "pieces",
    "completion_options",
]

AUTO_PARALLEL = 4  # slots tried when HEARTH_NUM_PARALLEL is unset (Ollama's old default)


@dataclass(frozen=True)
class Target:
    """A resolved model: its manifest, file, facts and Modelfile-style settings."""

    name: str
    record: ModelRecord
    path: Path
    info: ModelInfo
    params: dict[str, Any] = field(default_factory=dict)
    template: str | None = None  # the model's template layer, else the file's/plugin's
    system: str | None = None
    preset: tuple[ChatMessage, ...] = ()
    license: str | None = None
    projector: Path | None = None  # the vision projector file (llama.cpp's mmproj layout)
    projector_info: ModelInfo | None = None

    @property
    def key(self) -> str:
        return str(self.path)

    @property
    def capabilities(self) -> list[str]:
        return capabilities(self.info, self.template, self.projector_info)

    @property
    def tool_format(self) -> ToolCallFormat:
        """How the model writes tool calls, from its template and vocabulary."""
        return detect_tool_format(self.template, self.info.marker_tokens)

    @property
    def thinking_markers(self) -> ThinkingMarkers | None:
        """The markers around the model's reasoning, None when its template and vocabulary
        declare none."""
        return detect_thinking_markers(self.template, self.info.marker_tokens)

    def output_parser(
        self,
        think: bool | None,
        tools: Iterable[Mapping[str, Any]] = (),
        prompt: str = "",
        one_call: bool = False,
    ) -> OutputParser:
        """The parser for a reply to `prompt` in this model's formats. `think` as
        `shared.common.think_flag` gives it: True splits the thinking off; None (not asked) splits
        it off too when the model declares thinking markers (a model that thinks by default
        keeps its thinking out of the content); False drops what the model thinks anyway.
        A prompt that ends with the opening marker starts the reply inside the thinking.
        `tools`: the offered function tools (the templates' shape; their schemas check fenced
        calls); `one_call`: the request allows one call (the turn ends after it)."""
        schemas = tool_schemas(tools)
        if is_harmony(self.template, self.info.marker_tokens):  # gpt-oss: channels
            return HarmonyParser(think=True, tools=set(schemas), hide_thinking=think is False)
        markers = self.thinking_markers
        split = bool(think) or markers is not None
        markers = markers or THINK_TAGS
        return OutputParser(
            think=split,
            tools=schemas,
            format=self.tool_format,
            markers=markers,
            thinking_started=split and prompt.rstrip().endswith(markers.open),
            hide_thinking=think is False,
            one_call=one_call,
        )

    def require(self, capability: str, what: str) -> None:
        if not self.info.supported:
            raise RequestError(f"{self.name}: {self.info.problem}")
        if capability not in self.capabilities:
            raise RequestError(f"{self.name} does not support {what}")


@dataclass(frozen=True)
class GenerationSettings:
    """One request's settings once the model's parameters and the request's options are
    merged: how its runner must be started, which runtime options the request set itself
    (only those force a reload), and the sampling options sent with the completion."""

    runner: RunnerOptions
    explicit: frozenset[str]
    sampling: CompletionOptions
    layout: LayoutOptions = LayoutOptions()  # the request's num_gpu and main_gpu
    engine_fallback: bool = False  # Hearth's engine chosen by `auto`: llama.cpp if refused


def completion_options(merged: dict[str, Any], num_ctx: int) -> CompletionOptions:
    """The options a completion sends its runner, from `merged`: the model's parameters with
    the request's options over them (both validated by api.ollama.schemas.Options). The record's
    fields name the options it takes; the rest of `merged` picks the runner (RUNTIME_OPTIONS)
    or was refused unless it is off (typical_p). A num_predict that is unset or negative
    becomes 10 * num_ctx (Ollama's cap on runaway generation)."""
    names = CompletionOptions.names()
    record = from_wire(
        CompletionOptions, {k: v for k, v in merged.items() if k in names and v is not None}
    )
    if record.num_predict is None or record.num_predict < 0:
        record = replace(record, num_predict=10 * num_ctx)
    return record


class Service:
    def __init__(
        self, config: ServerConfig, store: ModelStore, scheduler: Scheduler, infos: ModelInfoCache
    ) -> None:
        self.config = config
        self.store = store
        self.scheduler = scheduler
        self.infos = infos

    async def target(self, name: str) -> Target:
        record = self.store.resolve(name)
        layer = record.layer("model")
        if layer is None:
            raise RequestError(f"{name} has no model file (its manifest lists no model layer)")
        path = self.store.blob_path(layer.digest)
        if not path.is_file():
            raise ModelFileMissing(
                f"the model file of {name} is missing from the store (was a linked file "
                "moved or deleted?); create the model again"
            )
        try:
            info = await asyncio.to_thread(self.infos.get, path)
        except GGUFError as e:
            raise RequestError(f"{name} cannot be used: {e}") from None
        projector, projector_info = None, None
        if (layer := record.layer("projector")) is not None:
            projector = self.store.blob_path(layer.digest)
            try:
                projector_info = await asyncio.to_thread(self.infos.get, projector)
            except (GGUFError, OSError) as e:
                raise RequestError(f"{name}: its vision projector cannot be used: {e}") from None
        return Target(
            name=record.name.display,
            record=record,
            path=path,
            info=info,
            params=self._params(record),
            template=self.store.read_text(record.layer("template")) or info.chat_template,
            system=self.store.read_text(record.layer("system")),
            preset=self._preset(record),
            license=self.store.read_text(record.layer("license")),
            projector=projector,
            projector_info=projector_info,
        )

    def _params(self, record: ModelRecord) -> dict[str, Any]:
        try:
            raw = json.loads(self.store.read_text(record.layer("params")) or "{}")
            params: dict[str, Any] = Options.model_validate(raw).model_dump(exclude_none=True)
            return params
        except (ValueError, ValidationError):
            return {}  # checked at create time; a hand-edited bad layer is ignored

    def _preset(self, record: ModelRecord) -> tuple[ChatMessage, ...]:
        try:
            raw = json.loads(self.store.read_text(record.layer("messages")) or "[]")
            return tuple(ChatMessage.model_validate(m) for m in raw)
        except (ValueError, ValidationError, TypeError):
            return ()

    def keep_alive(self, value: float | str | None) -> float:
        if value is None or value == "":
            return self.config.keep_alive
        try:
            return parse_duration(value)
        except ConfigError as e:
            raise RequestError(str(e)) from None

    def engine(self, target: Target, options: Options | None = None) -> EngineChoice:
        """Which engine runs the model and why (see store/engines.py); 400 when the one asked
        for cannot run it."""
        given = options.engine if options is not None else None
        try:
            choice = choose_engine(
                target.info.architecture,
                target.info.has_plugin,
                given or target.params.get("engine"),
                self.config.engine,
            )
        except EngineUnavailableError as e:
            raise RequestError(f"{target.name}: {e}") from None
        refused = self.scheduler.plugin_refusals.get(str(target.path))
        return choice.refused(target.info.architecture, refused) if refused else choice

    def settings(self, target: Target, options: Options | None) -> GenerationSettings:
        given = options.model_dump(exclude_none=True) if options is not None else {}
        merged = {**target.params, **given}
        load = LoadOptions(**{k: v for k, v in merged.items() if k in RUNTIME_OPTIONS})
        choice = self.engine(target, options) if target.info.supported else None
        engine = choice.engine if choice is not None else EngineKind.HEARTH
        trained = target.info.context_length or 1 << 24
        num_ctx = max(4, min(load.num_ctx or self.config.context_length, trained))
        flash = (
            self.config.flash_attention if load.flash_attention is None else load.flash_attention
        )
        runner = RunnerOptions(
            num_ctx=num_ctx,
            parallel=self.config.num_parallel or 1,  # automatic: 1 here, see spec()
            num_batch=min(load.num_batch or default("num_batch"), num_ctx),
            # More threads than CPUs only wait busily on each other (num_thread 1000 took the
            # machine): at most one per logical CPU.
            threads=min(load.num_thread or 0, os.cpu_count() or 1) or None,
            flash_attention=flash,
            # quantized K/V needs flash attention
            kv_type=KVCacheType(self.config.kv_cache_type) if flash else KVCacheType.F16,
            projector=str(target.projector) if target.projector is not None else None,
            engine=engine,
            draft_model=self._draft_model(load.draft_model, engine),
        )
        sampling = completion_options(merged, num_ctx)
        return GenerationSettings(
            runner,
            frozenset(k for k in given if k in RUNTIME_OPTIONS),
            sampling,
            layout=LayoutOptions.from_request(merged),
            engine_fallback=choice is not None and choice.falls_back,
        )

    def _draft_model(self, name: str | None, engine: EngineKind) -> str | None:
        """The file of the draft model `name` (the `draft_model` option), for Hearth's
        engine (llama.cpp's runner does not draft: its /api/ps says so); a 400 naming it
        when it is not installed."""
        if not name or engine != EngineKind.HEARTH:
            return None
        try:
            layer = self.store.resolve(name).layer("model")
        except ModelNotFound:
            raise RequestError(
                f"the draft model {name} is not installed; pull or create it first"
            ) from None
        if layer is None:
            raise RequestError(f"the draft model {name} has no model file")
        return str(self.store.blob_path(layer.digest))

    def memory(self, target: Target, settings: GenerationSettings) -> dict[str, int]:
        """Bytes a runner with these settings needs: estimated from the file, with the
        weights and graph the last runner of this file measured when there was one."""
        o = settings.runner
        estimate = target.info.estimate_memory(o.num_ctx, o.parallel, o.num_batch, o.kv_type)
        if target.projector_info is not None:
            estimate["weights"] += target.projector_info.weights_bytes
            estimate["total"] += target.projector_info.weights_bytes
        if o.draft_model:  # its weights (its cache and graph are small beside the model's)
            with contextlib.suppress(OSError):
                size = Path(o.draft_model).stat().st_size
                estimate["weights"] += size
                estimate["total"] += size
        measured = self.scheduler.measured.get((target.key, o.projector))
        if measured and measured.get("weights"):
            estimate["weights"] = measured["weights"]
            estimate["graph"] = max(estimate["graph"], measured.get("graph", 0))
            estimate["total"] = estimate["weights"] + estimate["kv_cache"] + estimate["graph"]
        return estimate

    def spec(self, target: Target, settings: GenerationSettings) -> LoadSpec:
        """What the scheduler loads. With HEARTH_NUM_PARALLEL unset, the spec is for one slot
        and offers AUTO_PARALLEL slots (with their estimate) for the scheduler to take when
        they fit in the available memory."""
        o = settings.runner
        estimate = self.memory(target, settings)
        choices: tuple[tuple[int, int], ...] = ()
        reason = f"HEARTH_NUM_PARALLEL={self.config.num_parallel}"
        if not self.config.num_parallel:
            more = replace(settings, runner=replace(o, parallel=AUTO_PARALLEL))
            choices = ((AUTO_PARALLEL, self.memory(target, more)["total"]),)
            reason = ""
        return LoadSpec(
            key=target.key,
            path=str(target.path),
            name=target.name,
            digest=target.record.digest,
            options=o,
            explicit=settings.explicit,
            estimate=estimate["total"],
            details=target.info.details(),
            parallel_choices=choices,
            parallel_reason=reason,
            fit=lambda options: self.fit(target, replace(settings, runner=options)),
            layout_options=settings.layout,
            engine_fallback=settings.engine_fallback,
        )

    def fit(self, target: Target, settings: GenerationSettings) -> MemoryReport:
        """The all-CPU memory report (FIT) for these settings, from the model file (blocking; see
        `layout.fit`): weights and KV cache per layer, the graph as `memory` gives it."""
        o = settings.runner
        projector = None
        if o.projector is not None and target.projector_info is not None:
            projector = target.projector_info.weights_bytes
        return fit_report(
            read_file_layers(target.path),
            cells=o.num_ctx * o.parallel,
            kv_type=o.kv_type,
            graph=self.memory(target, settings)["graph"],
            projector=projector,
            # a one-file vision model's own encoder (Hearth's engine loads it from the file)
            encoder=target.info.sees_images
            and o.projector is None
            and o.engine == EngineKind.HEARTH,
        )

    def images(self, images: list[str] | None) -> list[str]:
        c = self.config
        return [
            check_image(b64, c.max_image_bytes, c.max_image_pixels, i)
            for i, b64 in enumerate(images or [])
        ]

    def runner_failure(self, lease: Lease, error: RunnerError) -> ModelFailed | RequestError:
        """A runner's error on `lease` as the service's own: the runner is marked failed (the
        next request reloads it); a runner that died is the model failing, a live one refused
        the request."""
        dead = not lease.runner.alive or isinstance(error, RunnerCrashed)
        self.scheduler.runner_failed(lease.entry, crashed=dead)
        return (ModelFailed if dead else RequestError)(str(error))

    async def lease(self, target: Target, settings: GenerationSettings, keep_alive: float) -> Lease:
        if not target.info.supported:
            raise RequestError(f"{target.name}: {target.info.problem}")
        return await self.scheduler.acquire(self.spec(target, settings), keep_alive)

    async def generate(
        self,
        target: Target,
        settings: GenerationSettings,
        request: CompletionRequest,
        keep_alive: float,
    ) -> Generation:
        """Lease a runner and start the completion; errors before the first token raise
        (so the route can answer with a status code)."""
        started = time.perf_counter_ns()
        if not request.show_tokens and target.info.marker_tokens:
            # the markers the output parser looks for, also where they are control tokens
            request = replace(request, show_tokens=sorted(target.info.marker_tokens))
        lease = await self.lease(target, settings, keep_alive)
        gen = Generation(self, lease, request, started)
        try:
            await gen.prime()
        except BaseException:
            await gen.close()
            raise
        return gen
