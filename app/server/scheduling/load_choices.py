"""What one load decides from its spec, the memory and the layout, apart from the table of
loaded runners (which the scheduler keeps and evicts from):

* `fit_report`: the model's all-CPU memory report (FIT) for its runner options, read from the
  file in a thread (None: no placement, or the file cannot be planned; the runner's load will
  say what is wrong);
* `refuse_if_too_large`: `ModelTooLarge` with the numbers for a model that would not fit even
  with every other model unloaded (`reclaimable`: the bytes they hold);
* `system_memory_needed`: the bytes a load would take in system memory (the CPU's share of the
  layout it would choose now, or the whole estimate when nothing is planned);
* `choose_parallel`: the parallel slots of a spec whose HEARTH_NUM_PARALLEL is unset (see
  scheduler.py's docstring), with its one-slot fallback;
* `with_layout` and `on_llamacpp`: a spec started with another layout, or on llama.cpp's
  engine (the retries of a start that failed).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import overload

from ...runner.protocol import EngineKind
from .layout import MemoryReport, ModelTooLarge, human_bytes
from .layout.usage import device_usage
from .load_layout import Placed, Placement, layout_json
from .records import LoadSpec

__all__ = [
    "choose_parallel",
    "fit_report",
    "on_llamacpp",
    "refuse_if_too_large",
    "system_memory_needed",
    "with_layout",
]

log = logging.getLogger("hearth.scheduler")


async def fit_report(spec: LoadSpec, placement: Placement | None) -> MemoryReport | None:
    """`spec`'s FIT report, read from its file in a thread; None when nothing is planned."""
    if placement is None or spec.fit is None:
        return None
    try:
        return await asyncio.to_thread(spec.fit, spec.options)
    except (ValueError, OSError) as e:  # the runner's load will say what is wrong
        log.warning("%s: no memory layout planned (%s)", spec.name, e)
        return None


async def refuse_if_too_large(
    spec: LoadSpec, report: MemoryReport | None, placement: Placement | None, reclaimable: int
) -> None:
    """Refuse a model (its FIT `report`) that would not fit even with every other model
    unloaded (they hold `reclaimable` bytes), before unloading any (ModelTooLarge, with the
    numbers)."""
    if report is None or placement is None:
        return
    try:
        await placement.check(report, reclaimable)
    except ModelTooLarge as e:
        more = (
            f" (counting the {human_bytes(reclaimable)} that unloading the other models would free)"
            if reclaimable
            else ""
        )
        raise ModelTooLarge(f"{spec.name} cannot be loaded: {e}{more}") from None


async def system_memory_needed(
    spec: LoadSpec, report: MemoryReport | None, placement: Placement | None
) -> int:
    """Bytes `spec` (its FIT `report`) would take in system memory: the CPU's share of
    the layout a load would choose on the devices found now (a model that fits on GPUs
    needs little RAM), or the whole estimate when nothing is planned."""
    if report is None or placement is None:
        return spec.estimate
    layout, placed = await placement.preview(report, spec.layout_options)
    return device_usage(placed, layout)[0].total


def choose_parallel(spec: LoadSpec, available: int | None) -> tuple[LoadSpec, LoadSpec | None]:
    """The spec with its parallel slots settled for `available` bytes of memory (see the
    scheduler's docstring), and the one-slot spec to fall back on when several were chosen
    automatically."""
    if not spec.parallel_choices:
        return spec, None
    one = replace(spec, parallel_choices=())
    if available is None:
        return replace(one, parallel_reason="automatic: available memory unknown"), None
    for parallel, estimate in spec.parallel_choices:
        if estimate <= available:
            reason = (
                f"automatic: {parallel} slots need about {_gib(estimate)} "
                f"of the {_gib(available)} available"
            )
            options = replace(spec.options, parallel=parallel)
            chosen = replace(one, options=options, estimate=estimate, parallel_reason=reason)
            return chosen, one
    parallel, estimate = spec.parallel_choices[0]
    reason = (
        f"automatic: {parallel} slots would need about {_gib(estimate)}, "
        f"{_gib(available)} available"
    )
    return replace(one, parallel_reason=reason), None


@overload
def on_llamacpp(spec: LoadSpec) -> LoadSpec: ...
@overload
def on_llamacpp(spec: None) -> None: ...
def on_llamacpp(spec: LoadSpec | None) -> LoadSpec | None:
    """`spec` on the llama.cpp engine (which drafts with no draft model)."""
    if spec is None:
        return None
    options = replace(spec.options, engine=EngineKind.LLAMACPP, draft_model=None)
    return replace(spec, options=options, engine_fallback=False)


@overload
def with_layout(spec: LoadSpec, placed: Placed | None) -> LoadSpec: ...
@overload
def with_layout(spec: None, placed: Placed | None) -> None: ...
def with_layout(spec: LoadSpec | None, placed: Placed | None) -> LoadSpec | None:
    """`spec` whose runner is started with `placed`'s layout (None: everything on the CPU)."""
    if spec is None:
        return None
    layout = layout_json(placed.layout) if placed is not None else None
    return replace(spec, options=replace(spec.options, layout=layout))


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"
