"""The layout search: from the GPUs discovery found and a memory report (what a layout takes on
each device, computed from the model file: `fit.py`), the layers to place on each GPU
(`plan_layout`). Pure: no I/O, no clock; the same inputs give the same layout. The service
plans from the file only (`planning.plan_from_file`); no runner is asked, and no allocation is
retried with less memory: the runner's own allocation failure at start is the retry signal (the
scheduler starts it again on the CPU).

The rules, learned from Ollama's `llm/server.go` (buildLayout, assignLayers, findBestFit,
greedyFit, verifyLayout):

* A layer's size is its weights plus its KV cache, summed over every device in the report.
* GPUs are ordered discrete before integrated, then by free memory, largest first (`main_gpu`,
  when set, goes first). A model never mixes libraries (CUDA with ROCm or Vulkan, which may
  name the same card twice): each library's GPUs are planned alone and the one that offloads
  the most layers wins. RPC workers (other machines' devices, through ggml's RPC backend beside
  the local one; Ollama has none) join every library's GPUs, or are planned alone without any.
* Usable memory on a GPU = free - the runner's backend context there (CUDA context, cuBLAS
  workspace: `memory.BACKEND_CONTEXT` per library, or HEARTH_GPU_CONTEXT) - the per-GPU overhead
  (HEARTH_GPU_OVERHEAD) - its graph buffer in the report. A GPU absent from the report is given
  nothing.
* A vision projector/encoder (weights + compute buffer) goes on the first GPU in that order with
  room for it, before any layer; with no room it stays on the CPU.
* Layers fill GPUs from the last layer down, so the output layer (the last index) sits with the
  last blocks, and the layers left over are the first ones, on the CPU beside the token
  embedding: activations cross from CPU to GPU once. When not every layer fits, the search
  tries again without the output layer (repeating blocks are worth more on a GPU).
* As few GPUs as possible are used (the first one alone, then the first two, ...); among the
  GPUs in use, the layers spread in proportion to usable memory (the smallest capacity factor
  that still places the most layers). GPUs up to the last one holding layers in the report stay
  in use, so successive plans do not oscillate (Ollama's rule names the GPUs holding a graph,
  which its runner reports where it placed layers; the file's plan charges every GPU its graph
  before it holds any: `planning.py`).
* `num_gpu` >= 0 caps the layers offloaded; on the last attempt it is honoured even past the
  free memory (the user asked), unless other models are loaded (`require_full`); a runner that
  then runs out of memory at start is started again on the CPU.
* `tensor_split` gives each GPU (discovery order) a share of the layers; all GPUs with a share
  are used, each takes at most its share and at most its usable memory.
* The CPU holds the input weights, its graph, the layers left over and perhaps the projector; if
  that exceeds free RAM + swap the model cannot run on this machine: `ModelTooLarge`, with the
  numbers per device.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .memory import DeviceId, Gpu, Layout, MemoryReport, SystemMemory, human_bytes

__all__ = [
    "LayoutOptions",
    "LayoutRequestError",
    "LoadRequiresEviction",
    "ModelTooLarge",
    "Plan",
    "backend_context",
    "explain",
    "plan_layout",
]


class LayoutRequestError(ValueError):
    """The placement options cannot be honoured (a `tensor_split` with more shares than GPUs or
    no positive share): the service answers 400."""


class ModelTooLarge(ValueError):
    """The model does not fit in the GPUs and system memory together; the message gives the
    bytes needed and available on each device."""


class LoadRequiresEviction(Exception):
    """Other models are loaded and this one would not fit fully (`require_full`): the scheduler
    should unload one and plan again. Not an error for the user."""


@dataclass(frozen=True)
class LayoutOptions:
    """The placement a request (options) and the service (settings, state) ask for: the one
    record that travels from a request's settings (`from_request`: num_gpu, main_gpu) through
    the scheduler's load spec to the search, where the service adds `overhead` and
    `require_full`. `tensor_split` and `spread` are the search's (no request option sets them)."""

    num_gpu: int = -1  # layers to offload, output layer included; -1: as many as fit
    # Index into the GPUs as discovered: tried first, so it also gets the projector.
    main_gpu: int | None = None
    # Share of the layers per GPU, discovery order (GPU 0 takes the first layers); with it,
    # main_gpu does not reorder the GPUs.
    tensor_split: tuple[float, ...] = ()
    overhead: int = 0  # bytes kept free on every GPU (HEARTH_GPU_OVERHEAD)
    # A runner's backend context per GPU (HEARTH_GPU_CONTEXT); None: each library's constant
    context: int | None = None
    spread: bool = False  # use every GPU instead of as few as possible
    require_full: bool = False  # other models are loaded: a partial fit means evict one first

    @classmethod
    def from_request(cls, options: Mapping[str, Any]) -> LayoutOptions:
        """The request's part, from its merged options (Ollama's "num_gpu", "main_gpu";
        absent or None: as many layers as fit, no GPU first)."""
        num_gpu, main_gpu = options.get("num_gpu"), options.get("main_gpu")
        return cls(
            num_gpu=int(num_gpu) if num_gpu is not None else -1,
            main_gpu=int(main_gpu) if main_gpu is not None else None,
        )


@dataclass(frozen=True)
class Plan:
    """A layout with what it costs on each device, and a sentence for the log."""

    layout: Layout
    layers: int  # in the model, output layer included
    cpu_bytes: int
    gpu_bytes: Mapping[DeviceId, int] = field(default_factory=dict)
    note: str = ""


@dataclass
class _Slot:
    """A GPU during one plan: what is usable on it and, with tensor_split, its share of the
    model's bytes (then capacity factor 1.0 gives exactly the share, capped by memory)."""

    gpu: Gpu
    usable: int
    share: float | None
    integrated: bool

    def budget(self, capacity: float, forced: bool) -> int:
        if self.share is None:
            return int(capacity * self.usable)
        room = capacity * self.share
        return int(room if forced else min(room, self.usable))


def plan_layout(
    gpus: Sequence[Gpu],
    system: SystemMemory,
    report: MemoryReport,
    options: LayoutOptions = LayoutOptions(),
) -> Plan:
    """The layout for `report` (`MemoryReport.empty(layers)`: every layer free).

    Raises `ModelTooLarge` when the CPU's part exceeds free RAM + swap,
    `LoadRequiresEviction` when `options.require_full` and the layout is partial, and
    `LayoutRequestError` for a `tensor_split` that cannot apply. A `main_gpu` past the last
    GPU (or with none) is ignored, as Ollama does (its option defaults hold main_gpu 0), and
    `explain` says so."""
    _check_split(gpus, options)
    if not _main_gpu_exists(gpus, options):
        options = replace(options, main_gpu=None)
    sizes = report.layer_sizes()
    ordered = _ordered(gpus, options)
    best_assignment: list[tuple[DeviceId, list[int]]] = []
    best_projector: DeviceId | None = None
    best_count = -1
    for group in _by_library(ordered):
        slots = _slots(group, report, options, sizes)
        projector = _place_projector(slots, report, options)
        last_used = max((i for i, s in enumerate(slots) if _holds_layers(report, s)), default=0)
        assignment = _assign_layers(sizes, slots, options, last_used)
        count = sum(len(ls) for _, ls in assignment)
        if count > best_count:
            best_assignment, best_projector, best_count = assignment, projector, count
    layout = Layout.of(best_assignment, best_projector)
    return _verify(gpus, system, report, options, layout, sizes)


def _main_gpu_exists(gpus: Sequence[Gpu], options: LayoutOptions) -> bool:
    return options.main_gpu is None or 0 <= options.main_gpu < len(gpus)


def _check_split(gpus: Sequence[Gpu], options: LayoutOptions) -> None:
    split = options.tensor_split
    if split:
        if len(split) > len(gpus):
            raise LayoutRequestError(
                f"tensor_split has {len(split)} shares but only {len(gpus)} GPUs were found"
            )
        if any(not math.isfinite(s) or s < 0 for s in split) or not any(s > 0 for s in split):
            raise LayoutRequestError(
                "tensor_split must be non-negative numbers, at least one of them above 0"
            )


_RPC = "RPC"  # ggml's RPC backend: its devices are other machines'


def _ordered(gpus: Sequence[Gpu], options: LayoutOptions) -> list[tuple[int, Gpu]]:
    """(discovery index, GPU) in the order the search uses them."""
    indexed = list(enumerate(gpus))
    if options.tensor_split:  # the user's order: GPU 0 takes the first layers
        return [(i, g) for i, g in indexed if i < len(options.tensor_split)]
    indexed.sort(key=lambda ig: (ig[1].integrated, -ig[1].free))
    if options.main_gpu is not None:
        indexed.sort(key=lambda ig: ig[0] != options.main_gpu)
    return indexed


def _by_library(ordered: list[tuple[int, Gpu]]) -> list[list[tuple[int, Gpu]]]:
    """The GPUs of each local library with the RPC workers, in the search's order (the workers
    alone when there is no local GPU)."""
    libraries = dict.fromkeys(g.device.library for _, g in ordered if g.device.library != _RPC)
    if not libraries:
        return [ordered] if ordered else []
    return [[(i, g) for i, g in ordered if g.device.library in (lib, _RPC)] for lib in libraries]


def backend_context(gpu: Gpu, options: LayoutOptions) -> int:
    """What a runner's backend takes on `gpu` before any buffer of the model (its CUDA context
    and cuBLAS workspace): HEARTH_GPU_CONTEXT when set, else its library's constant."""
    return options.context if options.context is not None else gpu.minimum_memory


def _room(gpu: Gpu, options: LayoutOptions) -> int:
    """What the model may take on `gpu`: its free memory less the backend's context and the
    per-GPU overhead (its graph buffer comes out of this)."""
    return max(0, gpu.free - backend_context(gpu, options) - options.overhead)


def _usable(gpu: Gpu, report: MemoryReport, options: LayoutOptions) -> int:
    if gpu.device not in report.gpus:
        return 0  # not in the report (the empty report has none, and every layer is 0 there)
    return max(0, _room(gpu, options) - report.graph(gpu.device))


def _holds_layers(report: MemoryReport, slot: _Slot) -> bool:
    mem = report.gpus.get(slot.gpu.device)
    return mem is not None and (any(mem.weights) or any(mem.cache))


def _slots(
    group: list[tuple[int, Gpu]],
    report: MemoryReport,
    options: LayoutOptions,
    sizes: Sequence[int],
) -> list[_Slot]:
    slots = []
    split = options.tensor_split
    total_share = sum(split)
    user_placed = options.num_gpu >= 0 or options.spread or bool(split)
    for index, gpu in group:
        if split and split[index] == 0:
            continue
        usable = _usable(gpu, report, options)
        share = split[index] / total_share * sum(sizes) if split else None
        # With explicit placement, GPUs are equal: they split by memory, iGPUs included.
        slots.append(_Slot(gpu, usable, share, gpu.integrated and not user_placed))
    return slots


def _place_projector(
    slots: list[_Slot], report: MemoryReport, options: LayoutOptions
) -> DeviceId | None:
    """The first GPU with room for the projector takes it (its room shrinks for the layers)."""
    need = report.projector + report.projector_graph
    if not report.vision or options.num_gpu == 0 or not slots:
        return None
    for slot in slots:
        if slot.usable >= need:
            slot.usable -= need
            return slot.gpu.device
    return None


def _assign_layers(
    sizes: Sequence[int], slots: list[_Slot], options: LayoutOptions, last_used: int
) -> list[tuple[DeviceId, list[int]]]:
    """The most layers on the fewest GPUs; the output layer (last) only if every layer fits."""
    layers = list(sizes)
    requested = options.num_gpu
    spread = options.spread or bool(options.tensor_split)
    result: list[tuple[DeviceId, list[int]]] = []
    for _ in range(2):
        requested = min(len(layers), requested)
        if spread:
            result = _best_fit(layers, slots, requested, not options.require_full)
        else:
            for i in range(last_used, len(slots)):
                forced = i == len(slots) - 1 and not options.require_full
                result = _best_fit(layers, slots[: i + 1], requested, forced)
                got = _count(result)
                if got == len(layers) or got == requested:
                    break
        if _count(result) == len(layers):
            return result
        layers = layers[:-1]  # leave the output layer to the CPU and try again
    return result


def _count(assignment: list[tuple[DeviceId, list[int]]]) -> int:
    return sum(len(ls) for _, ls in assignment)


def _best_fit(
    layers: list[int], slots: list[_Slot], requested: int, forced: bool
) -> list[tuple[DeviceId, list[int]]]:
    """Per performance group (discrete, then integrated): the smallest capacity factor that still
    places the most layers, so the layers spread over the group in proportion to its memory."""
    result: list[tuple[DeviceId, list[int]]] = []
    for group in (
        [s for s in slots if not s.integrated],
        [s for s in slots if s.integrated],
    ):
        if not group:
            continue
        force = requested >= 0 and forced  # honour num_gpu past free memory
        # Shares are of the model's bytes, not of memory: let them grow until memory caps them.
        proportional = any(s.share is not None for s in group)
        high, low = (1000.0 if force or proportional else 1.0), 0.0
        best = _greedy_fit(layers, group, high, requested, force)
        most = _count(best)
        while high - low > 1e-6:
            mid = (low + high) / 2
            trial = _greedy_fit(layers, group, mid, requested, force)
            if _count(trial) == most:
                high, best = mid, trial
            else:
                low = mid
        placed = _count(best)
        layers = layers[: len(layers) - placed]
        requested -= placed
        result = best + result
    return result


def _greedy_fit(
    layers: list[int], slots: list[_Slot], capacity: float, requested: int, forced: bool
) -> list[tuple[DeviceId, list[int]]]:
    """From the last layer down: fill the last slot, spill to the one before it, and so on."""
    device = len(slots) - 1
    result: list[tuple[DeviceId, list[int]]] = [(slots[device].gpu.device, [])]
    room = slots[device].budget(capacity, forced)
    for i in range(len(layers) - 1, -1, -1):
        if requested >= 0 and len(layers) - 1 - i >= requested:
            break
        while layers[i] > room:
            device -= 1
            if device < 0:
                return result
            result.insert(0, (slots[device].gpu.device, []))
            room = slots[device].budget(capacity, forced)
        result[0][1].insert(0, i)
        room -= layers[i]
    return result


def _verify(
    gpus: Sequence[Gpu],
    system: SystemMemory,
    report: MemoryReport,
    options: LayoutOptions,
    layout: Layout,
    sizes: Sequence[int],
) -> Plan:
    projector = report.projector + report.projector_graph
    cpu = report.input_weights + report.cpu.graph
    cpu += sum(size for i, size in enumerate(sizes) if layout.device_of(i) is None)
    if layout.projector is None:
        cpu += projector
    gpu_bytes: dict[DeviceId, int] = {}
    for device in layout.devices:
        held = sum(sizes[i] for g in layout.gpus if g.device == device for i in g.layers)
        held += projector if layout.projector == device else 0
        gpu_bytes[device] = report.graph(device) + held
    offloaded, total = layout.offloaded, len(sizes)

    if options.require_full:
        partial = offloaded < total and (options.num_gpu < 0 or offloaded < options.num_gpu)
        if gpus and partial:
            raise LoadRequiresEviction(
                f"{offloaded}/{total} layers fit on the GPUs: unload a model to make room"
            )
        if cpu > system.free:
            raise LoadRequiresEviction(
                f"the model needs {human_bytes(cpu)} of system memory and "
                f"{human_bytes(system.free)} is free: unload a model to make room"
            )
    available = system.free + system.free_swap
    if cpu > available:
        raise ModelTooLarge(_too_large(gpus, system, report, options, layout, cpu, gpu_bytes))
    note = explain(gpus, report, options, layout)
    return Plan(layout, total, cpu, gpu_bytes, note)


def _too_large(
    gpus: Sequence[Gpu],
    system: SystemMemory,
    report: MemoryReport,
    options: LayoutOptions,
    layout: Layout,
    cpu: int,
    gpu_bytes: Mapping[DeviceId, int],
) -> str:
    """The refusal: bytes needed and available on each device, for the best layout found."""
    needed = cpu + sum(gpu_bytes.values())
    available = system.free + system.free_swap
    parts = [
        f"system memory needs {human_bytes(cpu)} ({cpu} bytes) and has {human_bytes(available)} "
        f"({available} bytes) available ({human_bytes(system.free)} free + "
        f"{human_bytes(system.free_swap)} swap)"
    ]
    for gpu in gpus:
        used = gpu_bytes.get(gpu.device, 0)
        room = _room(gpu, options)
        parts.append(
            f"{gpu.label} takes {human_bytes(used)} ({used} bytes) and has {human_bytes(room)} "
            f"({room} bytes) available ({human_bytes(gpu.free)} free, less "
            f"{human_bytes(gpu.free - room)} kept for the driver)"
        )
    return (
        f"the model is too large for this machine: it needs {human_bytes(needed)} "
        f"({needed} bytes) with {layout.describe(len(report.layer_sizes()))}; " + "; ".join(parts)
    )


def explain(
    gpus: Sequence[Gpu],
    report: MemoryReport,
    options: LayoutOptions,
    layout: Layout,
) -> str:
    """One sentence for the log: where `layout` puts the model and, when on the CPU, why."""
    total = report.layers
    where = layout.describe(total)
    if not gpus:
        note = "no GPU found: running on the CPU"
    elif options.num_gpu == 0:
        note = "num_gpu is 0: running on the CPU"
    elif not layout.gpus:
        room = ", ".join(f"{g.device} {human_bytes(_room(g, options))}" for g in gpus)
        graph = f"{human_bytes(report.cpu.graph)} " if report.cpu.graph else ""
        note = (
            f"not enough GPU memory for one layer and its {graph}compute graph ({room} usable): "
            "running on the CPU"
        )
    elif layout.offloaded < total:
        note = f"{where}, the rest on the CPU"
    else:
        note = where
    if report.vision and layout.projector is None and layout.gpus:
        need = human_bytes(report.projector + report.projector_graph)
        note += f"; the vision projector stays on the CPU (no GPU has {need} left for it)"
    if not _main_gpu_exists(gpus, options):
        found = f"{len(gpus)} GPU" + ("" if len(gpus) == 1 else "s")
        note += f"; main_gpu {options.main_gpu} ignored ({found} found, numbered from 0)"
    return note
