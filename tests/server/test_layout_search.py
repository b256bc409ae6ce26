"""The layout search on simulated devices (no GPU needed).

Part 1 ports every case of Ollama's `TestLLMServerFitGPU` (llm/server_test.go before 9db4bdbad):
the same GPUs, layer sizes, num_gpu and requireFull, and the same expected layout. Part 2 adds
Hearth's own cases; part 3 runs the whole fit/alloc/commit loop against a fake runner that
answers fit with per-layer sizes from a fake device set and fails allocations the way a real
device would."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from hearth.server.config import ServerConfig
from hearth.server.scheduling.layout import (
    CPU,
    DeviceId,
    DeviceMemory,
    GiB,
    Gpu,
    Layout,
    LayoutError,
    LayoutOptions,
    LayoutRequestError,
    LoadOperation,
    LoadReply,
    LoadRequiresEviction,
    MemoryReport,
    MiB,
    ModelTooLarge,
    SystemMemory,
    negotiate,
    plan_layout,
)

MIN = 457 * MiB  # the CUDA/ROCm/Vulkan minimum Ollama keeps free
# Ollama's test machine: 1 GiB RAM, 512 MiB free, 256 MiB swap free.
OLLAMA_SYSTEM = SystemMemory(total=GiB, free=512 * MiB, free_swap=256 * MiB)


def gpu(name: str, free: int, library: str = "", integrated: bool = False) -> Gpu:
    return Gpu(DeviceId(library, name), free, integrated=integrated)


def cpu_report(layers: Sequence[int], gpus: Sequence[Gpu]) -> MemoryReport:
    """Ollama's test report: the layer sizes as CPU weights, every GPU present with zeros."""
    zeros = (0,) * len(layers)
    return MemoryReport(
        cpu=DeviceMemory(tuple(layers), zeros),
        gpus={g.device: DeviceMemory(zeros, zeros) for g in gpus},
    )


def lay(*parts: tuple[str, Sequence[int]], library: str = "") -> Layout:
    return Layout.of((DeviceId(library, name), layers) for name, layers in parts)


# ---- part 1: Ollama's TestLLMServerFitGPU, case by case ------------------------------------

G0_128 = gpu("gpu0", 128 * MiB + MIN)
G0_256 = gpu("gpu0", 256 * MiB + MIN)
G1_256 = gpu("gpu1", 256 * MiB + MIN)
G1_256_IGPU = gpu("gpu1", 256 * MiB + MIN, integrated=True)
L3x50 = [50 * MiB] * 3
L4x100 = [100 * MiB] * 4
SPLIT = [256 * MiB, 50 * MiB, 50 * MiB]
PARTIAL = [256 * MiB, 256 * MiB, 50 * MiB]

OLLAMA_CASES = [
    # name, gpus, layers, num_gpu, require_full, expected layout (None: LoadRequiresEviction)
    ("No GPU", [], L3x50, -1, True, lay()),
    ("Full single GPU", [G0_256], L3x50, -1, False, lay(("gpu0", [0, 1, 2]))),
    ("Partial single GPU", [G0_256], L4x100, -1, False, lay(("gpu0", [1, 2]))),
    ("Single GPU with numGPU 1", [G0_256], L3x50, 1, False, lay(("gpu0", [1]))),
    ("Single GPU with numGPU 0", [G0_256], L3x50, 0, False, lay()),
    ("Single GPU with numGPU 999", [G0_256], L4x100, 999, False, lay(("gpu0", [0, 1, 2, 3]))),
    ("Multi GPU fits on one", [G0_128, G1_256], L3x50, -1, False, lay(("gpu1", [0, 1, 2]))),
    ("Multi GPU split", [G0_128, G1_256], SPLIT, -1, False, lay(("gpu1", [0]), ("gpu0", [1, 2]))),
    ("Multi GPU partial", [G0_128, G1_256], PARTIAL, -1, False, lay(("gpu1", [1]))),
    ("Multi GPU numGPU 1", [G0_128, G1_256], L3x50, 1, False, lay(("gpu1", [1]))),
    ("Multi GPU numGPU 2", [G0_128, G1_256], SPLIT, 2, False, lay(("gpu1", [0]), ("gpu0", [1]))),
    (
        "Multi GPU numGPU 999",
        [G0_128, G1_256],
        PARTIAL,
        999,
        False,
        lay(("gpu1", [0, 1]), ("gpu0", [2])),
    ),
    (
        "Multi GPU different libraries",
        [gpu("gpu0", 128 * MiB + MIN, "CUDA"), gpu("gpu1", 256 * MiB + MIN, "ROCm")],
        [128 * MiB, 128 * MiB, 50 * MiB],
        -1,
        False,
        lay(("gpu1", [0, 1]), library="ROCm"),
    ),
    ("requireFull", [G0_256], L4x100, -1, True, None),
    ("requireFull numGPU", [gpu("gpu0", 256 * MiB)], L4x100, 4, True, None),
    (
        "iGPU",
        [gpu("gpu0", 256 * MiB + MIN, integrated=True)],
        L3x50,
        -1,
        False,
        lay(("gpu0", [0, 1, 2])),
    ),
    ("iGPU + dGPU", [G0_128, G1_256_IGPU], L3x50, -1, False, lay(("gpu1", [0]), ("gpu0", [1, 2]))),
    (
        "iGPU + dGPU fits on one",
        [G0_128, G1_256_IGPU],
        [50 * MiB] * 2,
        -1,
        False,
        lay(("gpu0", [0, 1])),
    ),
    (
        "iGPU + dGPU partial",
        [G0_128, G1_256_IGPU],
        L4x100,
        -1,
        False,
        lay(("gpu1", [0, 1]), ("gpu0", [2])),
    ),
    ("iGPU + dGPU numGPU 1", [G0_128, G1_256_IGPU], L4x100, 1, False, lay(("gpu0", [2]))),
    (
        "iGPU + dGPU numGPU 999",
        [G0_128, G1_256_IGPU],
        L4x100,
        999,
        False,
        lay(("gpu0", [0]), ("gpu1", [1, 2, 3])),
    ),
]


@pytest.mark.parametrize(
    "gpus,layers,num_gpu,require_full,expected",
    [case[1:] for case in OLLAMA_CASES],
    ids=[case[0] for case in OLLAMA_CASES],
)
def test_ollama_fit_gpu_cases(gpus, layers, num_gpu, require_full, expected):
    report = cpu_report(layers, gpus)
    options = LayoutOptions(num_gpu=num_gpu, require_full=require_full)
    if expected is None:
        with pytest.raises(LoadRequiresEviction):
            plan_layout(gpus, OLLAMA_SYSTEM, report, options)
        return
    assert plan_layout(gpus, OLLAMA_SYSTEM, report, options).layout == expected


# ---- a fake runner: fit answers per-layer sizes from a fake device set ------------------------

CPU_DEV = CPU


@dataclass(frozen=True)
class FakeModel:
    """Sizes of a model as a runner would report them. Layers 0..blocks-1 are blocks, index
    `blocks` is the output layer; a GPU holding any layer gets `gpu_graph`."""

    blocks: int = 4
    block_weights: int = 80 * MiB
    block_cache: int = 20 * MiB
    output: int = 50 * MiB
    input_weights: int = 30 * MiB
    gpu_graph: int = 200 * MiB
    output_graph: int = 0  # more graph (the logits) on the GPU that holds the output layer
    cpu_graph: int = 20 * MiB
    projector: int = 0  # vision projector weights, 0: text only
    projector_graph: int = 0

    @property
    def layers(self) -> int:
        return self.blocks + 1

    def weights(self, i: int) -> int:
        return self.output if i == self.blocks else self.block_weights

    def cache(self, i: int) -> int:
        return 0 if i == self.blocks else self.block_cache


@dataclass
class FakeRunner:
    """Answers fit with the model's sizes on the devices the layout names; alloc fails on the
    first device whose share exceeds what is really free there (less the backend's minimum),
    which may be less than discovery said (`taken`: bytes grabbed since)."""

    model: FakeModel
    gpus: Sequence[Gpu]
    system: SystemMemory
    taken: dict[DeviceId, int] = field(default_factory=dict)
    always_fail: DeviceId | None = None
    calls: list[tuple[LoadOperation, Layout]] = field(default_factory=list)

    def report(self, layout: Layout) -> MemoryReport:
        m = self.model
        devices = [CPU_DEV, *(g.device for g in self.gpus)]
        weights = {d: [0] * m.layers for d in devices}
        cache = {d: [0] * m.layers for d in devices}
        for i in range(m.layers):
            device = layout.device_of(i) or CPU_DEV
            weights[device][i] = m.weights(i)
            cache[device][i] = m.cache(i)
        gpus = {
            g.device: DeviceMemory(
                tuple(weights[g.device]),
                tuple(cache[g.device]),
                (m.gpu_graph if any(g.device == p.device for p in layout.gpus) else 0)
                + (m.output_graph if layout.device_of(m.blocks) == g.device else 0),
            )
            for g in self.gpus
        }
        return MemoryReport(
            cpu=DeviceMemory(tuple(weights[CPU_DEV]), tuple(cache[CPU_DEV]), m.cpu_graph),
            gpus=gpus,
            input_weights=m.input_weights,
            vision=bool(m.projector),
            projector=m.projector,
            projector_graph=m.projector_graph,
        )

    def failing_device(self, report: MemoryReport, layout: Layout) -> DeviceId | None:
        projector = report.projector + report.projector_graph
        for g in self.gpus:
            mem = report.gpus[g.device]
            used = mem.size + (projector if layout.projector == g.device else 0)
            room = g.free - self.taken.get(g.device, 0) - g.minimum_memory
            if g.device == self.always_fail or used > room:
                return g.device
        cpu = report.cpu.size + report.input_weights
        cpu += projector if layout.projector is None else 0
        if cpu > self.system.free + self.system.free_swap:
            return CPU_DEV
        return None

    async def load(self, operation: LoadOperation, layout: Layout) -> LoadReply:
        self.calls.append((operation, layout))
        report = self.report(layout)
        if operation in (LoadOperation.FIT, LoadOperation.CLOSE):
            return LoadReply(report)
        failed = self.failing_device(report, layout)
        return LoadReply(report, success=failed is None, failed_device=failed)

    @property
    def operations(self) -> list[LoadOperation]:
        return [op for op, _ in self.calls]


ROOMY = SystemMemory(total=64 * GiB, free=32 * GiB, free_swap=0)
GRAPH = 200 * MiB  # FakeModel.gpu_graph
TEXT = FakeModel()  # 4 blocks of 100 MiB + an output layer of 50 MiB: 450 MiB of layers


def dev(name: str, library: str = "CUDA") -> DeviceId:
    return DeviceId(library, name)


def card(name: str, room: int, library: str = "CUDA", **kw) -> Gpu:
    """A GPU whose usable memory, once its graph is there, is `room` bytes."""
    return Gpu(DeviceId(library, name), MIN + GRAPH + room, **kw)


def cuda(*parts: tuple[str, Sequence[int]], projector: str | None = None) -> Layout:
    return Layout.of(
        ((dev(n), ls) for n, ls in parts), dev(projector) if projector is not None else None
    )


def run(runner: FakeRunner, options: LayoutOptions = LayoutOptions(), notes=None):
    said: list[str] = [] if notes is None else notes
    return asyncio.run(
        negotiate(
            runner,
            runner.gpus,
            runner.system,
            runner.model.layers,
            options,
            vision=bool(runner.model.projector),
            say=said.append,
        )
    )


# ---- part 2: Hearth's cases, through the whole fit/alloc/commit loop --------------------------


def test_one_gpu_with_room_for_all():
    runner = FakeRunner(TEXT, [card("0", 450 * MiB)], ROOMY)
    done = run(runner)
    assert done.layout == cuda(("0", [0, 1, 2, 3, 4]))
    assert runner.operations[-1] == LoadOperation.COMMIT
    assert runner.calls[-1][1] == done.layout
    assert done.notes[-1] == "5/5 layers on CUDA0"


def test_one_gpu_with_room_for_some():
    # 250 MiB usable: with the output layer, 50 + 100 + 100 fit but not everything, so the
    # search drops the output layer and places blocks 3 and 2 (the last ones).
    runner = FakeRunner(TEXT, [card("0", 250 * MiB)], ROOMY)
    done = run(runner)
    assert done.layout == cuda(("0", [2, 3]))
    assert done.notes[-1] == "2/5 layers on CUDA0, the rest on the CPU"


def test_one_gpu_with_room_for_none_falls_back_to_cpu():
    # 50 MiB usable once the graph is there: no block fits. Without a graph the GPU would take
    # two blocks, so plans swing between 0 and 2 layers; the count in between (1) does not
    # survive a fresh plan, so the CPU wins.
    runner = FakeRunner(TEXT, [card("0", 50 * MiB)], ROOMY)
    done = run(runner)
    assert done.layout == Layout()
    assert done.notes[-1] == (
        "not enough GPU memory for one layer and its compute graph (CUDA0 250.0 MiB usable): "
        "running on the CPU"
    )
    assert runner.calls[-1] == (LoadOperation.COMMIT, Layout())


def test_no_gpu_and_num_gpu_0_say_why_the_cpu():
    done = run(FakeRunner(TEXT, [], ROOMY))
    assert done.layout == Layout() and done.notes[-1] == "no GPU found: running on the CPU"
    done = run(FakeRunner(TEXT, [card("0", 8 * GiB)], ROOMY), LayoutOptions(num_gpu=0))
    assert done.layout == Layout() and done.notes[-1] == "num_gpu is 0: running on the CPU"


def test_two_gpus_of_unequal_size():
    # 300 and 150 MiB usable with their graphs: 450 MiB of layers need both, the larger GPU
    # takes the first blocks, the smaller one the last block and the output layer.
    runner = FakeRunner(TEXT, [card("0", 300 * MiB), card("1", 150 * MiB)], ROOMY)
    done = run(runner)
    assert done.layout == cuda(("0", [0, 1, 2]), ("1", [3, 4]))
    assert done.notes[-1] == "5/5 layers on CUDA0, CUDA1"


def test_two_gpus_where_one_is_enough_uses_the_larger_one():
    runner = FakeRunner(TEXT, [card("0", 100 * MiB), card("1", 600 * MiB)], ROOMY)
    assert run(runner).layout == cuda(("1", [0, 1, 2, 3, 4]))


def test_three_gpus_of_unequal_size():
    # 8 blocks (800 MiB) + output (50): 400 + 300 + 100 MiB usable hold the blocks exactly but
    # not the output layer, which stays on the CPU.
    model = FakeModel(blocks=8)
    gpus = [card("a", 300 * MiB), card("b", 100 * MiB), card("c", 400 * MiB)]
    done = run(FakeRunner(model, gpus, ROOMY))
    assert done.layout == cuda(("c", [0, 1, 2, 3]), ("a", [4, 5, 6]), ("b", [7]))


def test_output_layer_follows_the_last_layers():
    runner = FakeRunner(TEXT, [card("0", 300 * MiB), card("1", 150 * MiB)], ROOMY)
    layout = run(runner).layout
    assert layout.device_of(TEXT.blocks) == layout.device_of(TEXT.blocks - 1) == dev("1")
    # When not everything fits, the output layer is the one left to the CPU, not a block.
    layout = run(FakeRunner(TEXT, [card("0", 400 * MiB)], ROOMY)).layout
    assert layout == cuda(("0", [0, 1, 2, 3]))
    assert layout.device_of(TEXT.blocks) is None


def test_a_gpu_holding_another_models_graph_has_less_room():
    # Same cards, but another model's graph and weights hold 500 MiB of the first one: its free
    # memory says so, and the model goes to the other card.
    full = MIN + GRAPH + 600 * MiB
    gpus = [Gpu(dev("0"), full - 500 * MiB), Gpu(dev("1"), full - 100 * MiB)]
    assert run(FakeRunner(TEXT, gpus, ROOMY)).layout == cuda(("1", [0, 1, 2, 3, 4]))
    gpus = [Gpu(dev("0"), full - 100 * MiB), Gpu(dev("1"), full - 500 * MiB)]
    assert run(FakeRunner(TEXT, gpus, ROOMY)).layout == cuda(("0", [0, 1, 2, 3, 4]))


def test_allocation_failure_backs_off_the_failing_gpu():
    # Discovery says 450 MiB are usable, but 300 MiB went to another program since: alloc
    # fails on CUDA0. Each failure sets aside 10% more of its free memory (1107 MiB):
    # 10% leaves 339 MiB -> blocks 1-3 (fail, 350 MiB is really there for 500),
    # 20% leaves 228 MiB -> blocks 2-3 (fail, 400 > 350), 30% leaves 117 MiB -> block 3 (fits).
    gpus = [card("0", 450 * MiB)]
    runner = FakeRunner(TEXT, gpus, ROOMY, taken={dev("0"): 300 * MiB})
    said: list[str] = []
    done = run(runner, notes=said)
    assert done.layout == cuda(("0", [3]))
    allocs = [layout for op, layout in runner.calls if op == LoadOperation.ALLOC]
    assert allocs == [
        cuda(("0", [0, 1, 2, 3, 4])),
        cuda(("0", [1, 2, 3])),
        cuda(("0", [2, 3])),
        cuda(("0", [3])),
    ]
    backoffs = [s for s in said if s.startswith("allocation failed on CUDA0")]
    assert backoffs == [
        f"allocation failed on CUDA0: setting aside {p}% of its free memory and trying again"
        for p in (10, 20, 30)
    ]
    assert runner.calls[-1] == (LoadOperation.COMMIT, cuda(("0", [3])))


def test_allocation_that_keeps_failing_gives_up_and_closes():
    runner = FakeRunner(TEXT, [card("0", 450 * MiB)], ROOMY, always_fail=dev("0"))
    said: list[str] = []
    with pytest.raises(LayoutError, match="could not be allocated on CUDA0, not even with all"):
        run(runner, notes=said)
    assert [s for s in said if s.startswith("allocation failed")] == [
        f"allocation failed on CUDA0: setting aside {p}% of its free memory and trying again"
        for p in range(10, 101, 10)
    ]
    allocs = [op for op in runner.operations if op == LoadOperation.ALLOC]
    assert 1 <= len(allocs) <= 11  # layouts already tried are not sent again
    assert runner.operations[-1] == LoadOperation.CLOSE
    assert LoadOperation.COMMIT not in runner.operations


VISION = FakeModel(projector=300 * MiB, projector_graph=100 * MiB)


def test_vision_projector_on_the_gpu_with_the_layers():
    runner = FakeRunner(VISION, [card("0", 850 * MiB)], ROOMY)
    assert run(runner).layout == cuda(("0", [0, 1, 2, 3, 4]), projector="0")


def test_vision_projector_takes_the_first_gpu_with_room():
    # The larger card (CUDA1, 500 MiB usable) takes the 400 MiB projector first; the layers
    # then spread over the 100 MiB left there and CUDA0's 350 MiB.
    runner = FakeRunner(VISION, [card("0", 350 * MiB), card("1", 500 * MiB)], ROOMY)
    assert run(runner).layout == cuda(("1", [0]), ("0", [1, 2, 3, 4]), projector="1")


def test_vision_projector_without_room_stays_on_the_cpu():
    big = FakeModel(projector=2 * GiB, projector_graph=100 * MiB)
    said: list[str] = []
    done = run(FakeRunner(big, [card("0", 450 * MiB)], ROOMY), notes=said)
    assert done.layout == cuda(("0", [0, 1, 2, 3, 4]))
    assert done.layout.projector is None
    assert said[-1] == (
        "5/5 layers on CUDA0; the vision projector stays on the CPU "
        "(no GPU has 2.1 GiB left for it)"
    )


def test_num_gpu_caps_the_layers():
    runner = FakeRunner(TEXT, [card("0", 8 * GiB)], ROOMY)
    assert run(runner, LayoutOptions(num_gpu=2)).layout == cuda(("0", [2, 3]))
    runner = FakeRunner(TEXT, [card("0", 8 * GiB)], ROOMY)
    assert run(runner, LayoutOptions(num_gpu=5)).layout == cuda(("0", [0, 1, 2, 3, 4]))


def test_num_gpu_past_memory_is_tried_then_refused():
    runner = FakeRunner(TEXT, [card("0", 250 * MiB)], ROOMY)
    with pytest.raises(LayoutRequestError, match=r"cannot be allocated with num_gpu = 5"):
        run(runner, LayoutOptions(num_gpu=5))
    assert (LoadOperation.ALLOC, cuda(("0", [0, 1, 2, 3, 4]))) in runner.calls
    assert runner.operations[-1] == LoadOperation.CLOSE


def test_main_gpu_is_used_first():
    gpus = [card("0", 8 * GiB), card("1", 1 * GiB)]
    assert run(FakeRunner(TEXT, gpus, ROOMY)).layout == cuda(("0", [0, 1, 2, 3, 4]))
    done = run(FakeRunner(TEXT, gpus, ROOMY), LayoutOptions(main_gpu=1))
    assert done.layout == cuda(("1", [0, 1, 2, 3, 4]))
    done = run(FakeRunner(VISION, gpus, ROOMY), LayoutOptions(main_gpu=1))
    assert done.layout == cuda(("1", [0, 1, 2, 3, 4]), projector="1")


def test_main_gpu_that_does_not_exist_is_ignored_and_said():
    """As Ollama: its option defaults hold main_gpu 0, which a machine without a GPU must take."""
    notes: list[str] = []
    gpus = [card("0", GiB), card("1", 8 * GiB)]
    done = run(FakeRunner(TEXT, gpus, ROOMY), LayoutOptions(main_gpu=2), notes)
    assert done.layout == cuda(("1", [0, 1, 2, 3, 4]))  # the default order: most free first
    assert notes[-1].endswith("; main_gpu 2 ignored (2 GPUs found, numbered from 0)")
    notes.clear()
    done = run(FakeRunner(TEXT, [], ROOMY), LayoutOptions(main_gpu=0), notes)
    assert done.layout == Layout()
    assert (
        notes[-1]
        == "no GPU found: running on the CPU; main_gpu 0 ignored (0 GPUs found, numbered from 0)"
    )


def test_tensor_split_shares_the_layers():
    # Shares 1:3 of 450 MiB: the smallest factor that places every layer gives CUDA1 the last
    # three blocks and the output (350 MiB <= 1.04 x 337.5), CUDA0 block 0.
    gpus = [card("0", 8 * GiB), card("1", 8 * GiB)]
    done = run(FakeRunner(TEXT, gpus, ROOMY), LayoutOptions(tensor_split=(1, 3)))
    assert done.layout == cuda(("0", [0]), ("1", [1, 2, 3, 4]))
    done = run(FakeRunner(TEXT, gpus, ROOMY), LayoutOptions(tensor_split=(1, 1)))
    assert done.layout == cuda(("0", [0, 1]), ("1", [2, 3, 4]))
    done = run(FakeRunner(TEXT, gpus, ROOMY), LayoutOptions(tensor_split=(0, 1)))
    assert done.layout == cuda(("1", [0, 1, 2, 3, 4]))


def test_tensor_split_is_capped_by_memory():
    # 1:1 asks 225 MiB of each, but CUDA0 holds 100 MiB: it takes one block (its cap), and the
    # smallest factor that still places every layer (350 MiB <= 1.56 x 225) gives CUDA1 the rest.
    gpus = [card("0", 100 * MiB), card("1", 8 * GiB)]
    done = run(FakeRunner(TEXT, gpus, ROOMY), LayoutOptions(tensor_split=(1, 1)))
    assert done.layout == cuda(("0", [0]), ("1", [1, 2, 3, 4]))


@pytest.mark.parametrize("split", [(0, 0), (-1, 2), (1, 1, 1)])
def test_bad_tensor_split_is_refused(split):
    with pytest.raises(LayoutRequestError, match="tensor_split"):
        run(
            FakeRunner(TEXT, [card("0", GiB), card("1", GiB)], ROOMY),
            LayoutOptions(tensor_split=split),
        )


def test_gpu_overhead_is_kept_free():
    runner = FakeRunner(TEXT, [card("0", 450 * MiB)], ROOMY)
    done = run(runner, LayoutOptions(overhead=100 * MiB))
    assert done.layout == cuda(("0", [1, 2, 3]))
    assert ServerConfig.from_env({"HEARTH_GPU_OVERHEAD": str(100 * MiB)}).gpu_overhead == 100 * MiB
    assert ServerConfig.from_env({}).gpu_overhead == 0


def test_gpus_of_two_libraries_are_not_mixed():
    gpus = [card("0", 300 * MiB, "CUDA"), card("0", 150 * MiB, "Vulkan")]
    assert run(FakeRunner(TEXT, gpus, ROOMY)).layout == cuda(("0", [1, 2, 3]))


def test_other_models_loaded_and_a_partial_fit_asks_for_eviction():
    runner = FakeRunner(TEXT, [card("0", 250 * MiB)], ROOMY)
    with pytest.raises(LoadRequiresEviction):
        run(runner, LayoutOptions(require_full=True))
    assert LoadOperation.ALLOC not in runner.operations


def test_too_large_for_every_device_is_refused_before_loading_with_the_numbers():
    # GPU: 250 MiB usable holds blocks 2-3 (200 MiB) and its graph (200 MiB); the CPU would need
    # input 30 + graph 20 + blocks 0-1 (200) + output (50) = 300 MiB with 100 MiB free, no swap.
    tight = SystemMemory(total=GiB, free=100 * MiB, free_swap=0)
    runner = FakeRunner(TEXT, [Gpu(dev("0"), MIN + GRAPH + 250 * MiB, name="Fake 1")], tight)
    with pytest.raises(ModelTooLarge) as caught:
        run(runner)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == (
        "the model is too large for this machine: it needs 700.0 MiB (734003200 bytes) with "
        "2/5 layers on CUDA0; system memory needs 300.0 MiB (314572800 bytes) and has "
        "100.0 MiB (104857600 bytes) available (100.0 MiB free + 0 B swap); "
        "CUDA0 (Fake 1) takes 400.0 MiB (419430400 bytes) and has 450.0 MiB (471859200 bytes) "
        "available (907.0 MiB free, less 457.0 MiB kept for the driver)"
    )
    assert LoadOperation.ALLOC not in runner.operations
    assert LoadOperation.COMMIT not in runner.operations
    assert runner.operations[-1] == LoadOperation.CLOSE


def test_no_gpu_and_too_little_ram_is_refused_with_the_numbers():
    tight = SystemMemory(total=GiB, free=400 * MiB, free_swap=50 * MiB)
    with pytest.raises(ModelTooLarge, match=r"system memory needs 500\.0 MiB \(524288000 bytes\)"):
        run(FakeRunner(TEXT, [], tight))


def test_layout_is_canonical():
    a = Layout.of([(dev("1"), [4, 3]), (dev("0"), [0, 1, 2]), (dev("2"), [])])
    b = Layout.of([(dev("0"), [2, 1, 0]), (dev("1"), [3, 4])])
    assert a == b and hash(a) == hash(b)
    assert a.gpus[0].device == dev("0") and a.offloaded == 5
    assert a.describe(6) == "5/6 layers on CUDA0, CUDA1"
    assert Layout().describe(6) == "CPU only"


def test_a_gpu_the_runner_does_not_report_gets_nothing():
    # The larger GPU is missing from the fit report (the runner cannot use it): only the
    # other one is planned, and its 128 MiB take two of the three layers (the blocks).
    report = cpu_report(L3x50, [G0_128])
    plan = plan_layout([G0_128, G1_256], OLLAMA_SYSTEM, report)
    assert plan.layout == lay(("gpu0", [0, 1]))


def test_gpus_up_to_the_last_with_a_graph_stay_in_use():
    # gpu0 alone could hold the three layers, but the last fit put a graph (10 MiB) on gpu1:
    # both stay in use, so plans do not swing. The smallest factor that places the three
    # layers gives gpu1 (118 MiB usable) one layer and gpu0 the first two.
    report = cpu_report(L3x50, [G0_256, G1_128 := gpu("gpu1", 128 * MiB + MIN)])
    zeros = (0,) * 3
    report = MemoryReport(
        cpu=report.cpu,
        gpus={
            G0_256.device: DeviceMemory(zeros, zeros),
            G1_128.device: DeviceMemory(zeros, zeros, 10 * MiB),
        },
    )
    plan = plan_layout([G0_256, G1_128], OLLAMA_SYSTEM, report)
    assert plan.layout == lay(("gpu0", [0, 1]), ("gpu1", [2]))
    assert plan.gpu_bytes == {G0_256.device: 100 * MiB, G1_128.device: 60 * MiB}
    assert plan.cpu_bytes == 0


def test_plans_that_swing_try_the_counts_between():
    # A GPU with 900 MiB usable; 8 blocks of 100 MiB, output 50 MiB, graph 100 MiB plus 300 MiB
    # of logits where the output layer is. First fit (everything there): 400 MiB of graph
    # leave 500, so five blocks. Their fit has no logits on the GPU: 800 MiB usable, eight
    # blocks, more than five, so the counts from eight down are tried with num_gpu forced:
    # eight blocks (800 + 100 = 900) fit and a fresh plan keeps them.
    model = FakeModel(blocks=8, gpu_graph=100 * MiB, output_graph=300 * MiB)
    gpus = [Gpu(dev("0"), MIN + 900 * MiB)]
    runner = FakeRunner(model, gpus, ROOMY)
    done = run(runner)
    assert done.layout == cuda(("0", list(range(8))))
    assert [layout for op, layout in runner.calls if op == LoadOperation.FIT] == [
        cuda(("0", list(range(9)))),
        cuda(("0", [3, 4, 5, 6, 7])),
        cuda(("0", list(range(8)))),
    ]
    assert runner.operations[-2:] == [LoadOperation.ALLOC, LoadOperation.COMMIT]


def test_only_the_failing_gpu_backs_off():
    # As in the two-GPU case (CUDA0 [0-2], CUDA1 [3, 4]), but 100 MiB of CUDA1 went elsewhere
    # since discovery: its alloc fails. CUDA1 alone sets aside 10% (807 -> 69 MiB usable with
    # its graph, not a block's worth), so blocks 1-3 go to CUDA0, whose 300 MiB are untouched.
    gpus = [card("0", 300 * MiB), card("1", 150 * MiB)]
    runner = FakeRunner(TEXT, gpus, ROOMY, taken={dev("1"): 100 * MiB})
    said: list[str] = []
    done = run(runner, notes=said)
    assert done.layout == cuda(("0", [1, 2, 3]))
    assert [s for s in said if s.startswith("allocation failed")] == [
        "allocation failed on CUDA1: setting aside 10% of its free memory and trying again"
    ]
