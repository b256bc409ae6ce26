"""The layout of a model planned from its file: `plan_from_file`.

The service plans every layout before the runner starts, from the model file's all-CPU memory
report (`fit.fit_report`) and the devices found; no runner is asked. The search (`plan_layout`)
needs to know what a layout takes on each device:

* Each GPU given layers gets a graph (compute) buffer, the file's one estimate. The search is
  told that every GPU found holds it (`_charged`), whether the layout gives it layers yet or
  not: a model one GPU cannot hold then spreads over the next ones by the memory each really
  has for layers, and one that fits on one GPU stays there. (Ollama's search sees a graph only
  on the GPUs its runner used in the last fit and counts the others' whole free memory; a plan
  from the file learns nothing by waiting, and a GPU counted without its graph could be given
  layers it has no room for once the graph is there.)
* A tied output layer's copy of the token embedding counts only on a GPU, so the layer sizes
  depend on where the output layer goes. The plan is refined: plan from an empty report (every
  layer free: the whole model on the first GPU in the search's order), move the file's bytes
  onto that layout (`fit.placed_report`), plan again from that, and so on while the layout
  shrinks; a layout planned twice, or one with more layers on GPUs, ends the search (layouts
  only shrink, as in Ollama's `ollamaServer.Load`, so it always ends).

Nothing here allocates or backs off: the runner allocates what `--layout` says while it starts,
and its real allocation failure is the signal that counts (the scheduler starts it again on the
CPU), which a plan from the file cannot foresee. Ollama's loop also tries the counts between two
plans that swing by more than one layer (a runner's graph growing with the output layer); the
file's reports do not swing that way (a layout grows by at most the output layer), so that step
is not here either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .fit import placed_report
from .memory import DeviceMemory, Gpu, Layout, MemoryReport, SystemMemory
from .search import LayoutOptions, explain, plan_layout

__all__ = ["FilePlan", "plan_from_file"]


@dataclass(frozen=True)
class FilePlan:
    """The layout planned, the file's bytes moved onto it, and where it runs in one sentence
    for the log ("no GPU found: running on the CPU", "18/19 layers on CUDA0, the rest on the
    CPU")."""

    layout: Layout
    memory: MemoryReport
    note: str


def plan_from_file(
    gpus: Sequence[Gpu],
    system: SystemMemory,
    report: MemoryReport,
    options: LayoutOptions = LayoutOptions(),
) -> FilePlan:
    """The layout for the model whose all-CPU memory `report` (from its file) is given, on
    `gpus` and `system` (see the module docstring). Raises what `plan_layout` raises:
    `ModelTooLarge`, `LoadRequiresEviction` (`options.require_full`), `LayoutRequestError`."""
    empty = MemoryReport.empty(report.layers, report.vision)
    layout = plan_layout(gpus, system, empty, options).layout
    seen: set[Layout] = set()
    while True:
        memory = placed_report(report, layout)
        seen.add(layout)
        new = plan_layout(gpus, system, _charged(memory, gpus), options).layout
        if new in seen or new.offloaded > layout.offloaded:
            return FilePlan(layout, memory, explain(gpus, memory, options, layout))
        layout = new


def _charged(memory: MemoryReport, gpus: Sequence[Gpu]) -> MemoryReport:
    """`memory` (a placed report) with every GPU in `gpus` present: one the layout gives no
    layers holds none and the graph buffer it would take once given some (the CPU's estimate,
    which `placed_report` gives every GPU holding layers)."""
    zeros = (0,) * memory.layers
    idle = DeviceMemory(zeros, zeros, memory.cpu.graph)
    return replace(memory, gpus={g.device: memory.gpus.get(g.device, idle) for g in gpus})
