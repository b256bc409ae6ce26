"""The layout search on simulated devices (no GPU needed).

Part 1 ports every case of Ollama's `TestLLMServerFitGPU` (llm/server_test.go before 9db4bdbad):
the same GPUs, layer sizes, num_gpu and requireFull, and the same expected layout. Part 2 runs
the service's planning call, `plan_from_file`, on a model's all-CPU report as the file gives it
(per-layer sizes, one graph estimate): the layout planned and its placed report. Part 3 holds
the search's rules for several GPUs (`plan_layout` on a report naming every GPU). What happens
when the runner's start then fails for lack of memory (a retry on the CPU) is
tests/server/test_load_fit.py's."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from hearth.server.config import ServerConfig
from hearth.server.scheduling.layout import (
    DeviceId,
    DeviceMemory,
    FilePlan,
    GiB,
    Gpu,
    Layout,
    LayoutOptions,
    LayoutRequestError,
    LoadRequiresEviction,
    MemoryReport,
    MiB,
    ModelTooLarge,
    SystemMemory,
    backend_context,
    plan_from_file,
    plan_layout,
)
from hearth.server.scheduling.layout.fit import placed_report
from hearth.server.scheduling.layout.usage import device_usage

MIN = 457 * MiB  # the minimum Ollama keeps free (here: a GPU of no named library)


def context(library: str) -> int:
    """What the plan leaves on a GPU of `library` for a runner's backend context."""
    return Gpu(DeviceId(library, "0"), 0).minimum_memory


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


# ---- a model as its file gives it: per-layer sizes, all on the CPU ---------------------------


@dataclass(frozen=True)
class FakeModel:
    """Sizes of a model as `fit.fit_report` computes them from a file. Layers 0..blocks-1 are
    blocks, index `blocks` is the output layer; `graph` is the one compute-buffer estimate
    (the CPU's, and each GPU's once it holds layers); `output_copy` the token embedding a tied
    output layer takes on a GPU."""

    blocks: int = 4
    block_weights: int = 80 * MiB
    block_cache: int = 20 * MiB
    output: int = 50 * MiB
    input_weights: int = 30 * MiB
    graph: int = 200 * MiB
    projector: int = 0  # vision projector weights, 0: text only
    projector_graph: int = 0
    output_copy: int = 0

    @property
    def report(self) -> MemoryReport:
        """The all-CPU report, as `fit_report` gives it."""
        weights = (self.block_weights,) * self.blocks + (self.output,)
        cache = (self.block_cache,) * self.blocks + (0,)
        return MemoryReport(
            cpu=DeviceMemory(weights, cache, self.graph),
            input_weights=self.input_weights,
            vision=bool(self.projector),
            projector=self.projector,
            projector_graph=self.projector_graph,
            output_copy=self.output_copy,
        )

    def on_every_gpu(self, gpus: Sequence[Gpu]) -> MemoryReport:
        """The report with every GPU present and holding a graph, as if each had layers: what
        the search's rules for several GPUs are shown on (part 3)."""
        zeros = (0,) * (self.blocks + 1)
        report = self.report
        gpu_part = DeviceMemory(zeros, zeros, self.graph)
        return MemoryReport(
            cpu=report.cpu,
            gpus={g.device: gpu_part for g in gpus},
            input_weights=report.input_weights,
            vision=report.vision,
            projector=report.projector,
            projector_graph=report.projector_graph,
        )


ROOMY = SystemMemory(total=64 * GiB, free=32 * GiB, free_swap=0)
GRAPH = 200 * MiB  # FakeModel.graph
TEXT = FakeModel()  # 4 blocks of 100 MiB + an output layer of 50 MiB: 450 MiB of layers


def dev(name: str, library: str = "CUDA") -> DeviceId:
    return DeviceId(library, name)


def card(name: str, room: int, library: str = "CUDA", **kw) -> Gpu:
    """A GPU whose usable memory, once its graph is there, is `room` bytes."""
    return Gpu(DeviceId(library, name), context(library) + GRAPH + room, **kw)


def cuda(*parts: tuple[str, Sequence[int]], projector: str | None = None) -> Layout:
    return Layout.of(
        ((dev(n), ls) for n, ls in parts), dev(projector) if projector is not None else None
    )


def plan(
    model: FakeModel,
    gpus: Sequence[Gpu],
    options: LayoutOptions = LayoutOptions(),
    system: SystemMemory = ROOMY,
) -> FilePlan:
    """`plan_from_file` on the model's file report; its report is the file's moved onto the
    layout, a fresh plan from that report does not shrink the layout (it has settled), and
    each GPU has room for what the layout puts there, its graph included (unless num_gpu
    asked for more)."""
    done = plan_from_file(gpus, system, model.report, options)
    assert done.memory == placed_report(model.report, done.layout)
    again = plan_layout(gpus, system, done.memory, options).layout
    assert again.offloaded >= done.layout.offloaded
    free = {g.device: g.free - backend_context(g, options) - options.overhead for g in gpus}
    for usage in device_usage(done.memory, done.layout)[1:]:
        assert options.num_gpu >= 0 or usage.total <= free[usage.device], usage
    return done


# ---- part 2: the service's planning call, from the file's report ------------------------------


def test_one_gpu_with_room_for_all():
    done = plan(TEXT, [card("0", 450 * MiB)])
    assert done.layout == cuda(("0", [0, 1, 2, 3, 4]))
    assert done.note == "5/5 layers on CUDA0"
    # the placed report: every layer's bytes and a graph on the GPU, the CPU keeps its own graph
    assert done.memory.gpus[dev("0")].size == 450 * MiB + GRAPH
    assert done.memory.cpu.size == GRAPH


def test_one_gpu_with_room_for_some():
    # 250 MiB usable: with the output layer, 50 + 100 + 100 fit but not everything, so the
    # search drops the output layer and places blocks 3 and 2 (the last ones).
    done = plan(TEXT, [card("0", 250 * MiB)])
    assert done.layout == cuda(("0", [2, 3]))
    assert done.note == "2/5 layers on CUDA0, the rest on the CPU"


def test_the_graph_counts_once_the_gpu_holds_layers():
    # 50 MiB usable once the graph is there: no block fits. The first plan (every layer free)
    # puts the model on the GPU; the file's report for it brings the graph, and the plan from
    # that report leaves the GPU, so the CPU wins. The sentence gives the GPU's memory beyond
    # the driver's share (250 MiB) and the graph that must fit there with a layer.
    done = plan(TEXT, [card("0", 50 * MiB)])
    assert done.layout == Layout()
    assert done.note == (
        "not enough GPU memory for one layer and its 200.0 MiB compute graph "
        "(CUDA0 250.0 MiB usable): running on the CPU"
    )


def test_a_tied_output_copy_counts_on_the_gpu_holding_the_output_layer():
    # The output layer reads the token embedding: a 100 MiB copy of it goes where the output
    # layer goes. All five layers take 550 MiB there, more than 450: the blocks stay, the output
    # layer (and so the copy) goes to the CPU.
    assert plan(TEXT, [card("0", 450 * MiB)]).layout == cuda(("0", [0, 1, 2, 3, 4]))
    tied = FakeModel(output_copy=100 * MiB)
    done = plan(tied, [card("0", 450 * MiB)])
    assert done.layout == cuda(("0", [0, 1, 2, 3]))
    assert done.memory.gpus[dev("0")].size == 400 * MiB + GRAPH
    done = plan(tied, [card("0", 550 * MiB)])
    assert done.layout == cuda(("0", [0, 1, 2, 3, 4]))
    assert done.memory.gpus[dev("0")].size == 550 * MiB + GRAPH


def test_each_gpu_keeps_a_runner_s_backend_context_free():
    # A runner's CUDA context and cuBLAS workspace took 655-660 MiB of an H200 beside its
    # buffers (nvidia-smi, bench/results/gpu-h200-2026-11-27.json): a GPU whose free memory
    # holds the model's 450 MiB and graph but only Ollama's 457 MiB beside them has 247 MiB
    # for layers once the context is counted: blocks 2 and 3, the rest on the CPU.
    assert context("CUDA") == 660 * MiB and context("Metal") == 512 * MiB
    assert context("ROCm") == context("Vulkan") == context("RPC") == MIN
    tight = [Gpu(dev("0"), MIN + GRAPH + 450 * MiB)]
    done = plan(TEXT, tight)
    assert done.layout == cuda(("0", [2, 3]))
    roomy = [Gpu(dev("0"), 660 * MiB + GRAPH + 450 * MiB)]
    assert plan(TEXT, roomy).layout == cuda(("0", [0, 1, 2, 3, 4]))
    # HEARTH_GPU_CONTEXT (a figure measured on this GPU) replaces the constant on every GPU
    measured = LayoutOptions(context=MIN)
    assert plan(TEXT, tight, measured).layout == cuda(("0", [0, 1, 2, 3, 4]))
    assert plan(TEXT, roomy, LayoutOptions(context=GiB)).layout.offloaded < 5


def test_no_gpu_and_num_gpu_0_say_why_the_cpu():
    done = plan(TEXT, [])
    assert done.layout == Layout() and done.note == "no GPU found: running on the CPU"
    done = plan(TEXT, [card("0", 8 * GiB)], LayoutOptions(num_gpu=0))
    assert done.layout == Layout() and done.note == "num_gpu is 0: running on the CPU"


def test_two_gpus_where_one_is_enough_uses_the_larger_one():
    gpus = [card("0", 100 * MiB), card("1", 600 * MiB)]
    assert plan(TEXT, gpus).layout == cuda(("1", [0, 1, 2, 3, 4]))


def test_a_model_too_large_for_one_gpu_spreads_over_two():
    # Two GPUs of 1 GiB usable each (with their graphs), 1.5 GiB of blocks and a 50 MiB output
    # layer: neither holds the model alone, so its layers spread over both, each GPU holding
    # layers gets a graph, and the CPU keeps the input weights and its own graph only.
    model = FakeModel(blocks=15)
    done = plan(model, [card("0", GiB), card("1", GiB)])
    assert done.layout.offloaded == 16
    assert [g.device for g in done.layout.gpus] == [dev("0"), dev("1")]
    assert done.note == "16/16 layers on CUDA0, CUDA1"
    assert done.memory.graph(dev("0")) == done.memory.graph(dev("1")) == GRAPH
    on_gpus = sum(done.memory.gpus[d].size for d in (dev("0"), dev("1")))
    assert on_gpus == 1550 * MiB + 2 * GRAPH
    assert done.memory.cpu.size == GRAPH
    (cpu, *gpus) = device_usage(done.memory, done.layout)
    assert (cpu.layers, cpu.weights, cpu.cache) == (0, model.input_weights, 0)
    assert all(u.graph == GRAPH and u.total <= GiB + GRAPH for u in gpus)


def test_a_file_plan_over_two_unequal_gpus_is_the_search_s_with_every_graph_counted():
    # 300 and 150 MiB usable with their graphs, 450 MiB of layers: the plan from the file ends
    # where the search does on a report holding both graphs (part 3's two unequal GPUs).
    gpus = [card("0", 300 * MiB), card("1", 150 * MiB)]
    done = plan(TEXT, gpus)
    assert done.layout == cuda(("0", [0, 1, 2]), ("1", [3, 4]))
    assert done.layout == search(TEXT, gpus).layout


def test_a_model_too_large_for_one_rpc_worker_spreads_over_two():
    # RPC workers are GPUs to the layout: two of 300 MiB usable share the 450 MiB of layers.
    workers = [card("0", 300 * MiB, "RPC"), card("1", 300 * MiB, "RPC")]
    done = plan(TEXT, workers)
    assert done.layout.offloaded == 5
    assert {g.device for g in done.layout.gpus} == {dev("0", "RPC"), dev("1", "RPC")}


def test_rpc_workers_join_the_gpus_of_any_library():
    # Workers are other machines' devices, driven through ggml's RPC backend beside the local
    # one: a model too large for the local GPU spreads onto a worker, whatever the GPU's library.
    for library in ("CUDA", "ROCm", "Vulkan"):
        gpus = [card("0", 300 * MiB, library), card("0", 300 * MiB, "RPC")]
        done = plan(TEXT, gpus)
        assert done.layout.offloaded == 5, library
        assert {g.device for g in done.layout.gpus} == {dev("0", library), dev("0", "RPC")}
    # Two local libraries still do not mix; the workers go with the one that offloads the most.
    gpus = [
        card("0", 200 * MiB, "CUDA"),
        card("0", 100 * MiB, "Vulkan"),
        card("0", 250 * MiB, "RPC"),
    ]
    done = plan(TEXT, gpus)
    assert {g.device for g in done.layout.gpus} == {dev("0", "CUDA"), dev("0", "RPC")}


@pytest.mark.parametrize(
    "libraries", [("CUDA",) * 3, ("CUDA", "Vulkan", "CUDA"), ("CUDA", "RPC", "Vulkan")]
)
@pytest.mark.parametrize("model", [TEXT, FakeModel(blocks=8), FakeModel(output_copy=100 * MiB)])
def test_every_plan_over_three_gpus_fits_the_gpus_it_uses(libraries, model):
    # `plan` checks that each GPU has room for its layers and graph, and that the plan settled.
    rooms = (0, 150 * MiB, 300 * MiB, 600 * MiB)
    for three in itertools.product(rooms, repeat=3):
        named = enumerate(zip(three, libraries, strict=True))
        plan(model, [card(str(i), room, library) for i, (room, library) in named])


def test_output_layer_stays_on_the_cpu_when_not_everything_fits():
    layout = plan(TEXT, [card("0", 400 * MiB)]).layout
    assert layout == cuda(("0", [0, 1, 2, 3]))
    assert layout.device_of(TEXT.blocks) is None


def test_a_gpu_holding_another_models_graph_has_less_room():
    # Same cards, but another model's graph and weights hold 500 MiB of the first one: its free
    # memory says so, and the model goes to the other card.
    full = context("CUDA") + GRAPH + 600 * MiB
    gpus = [Gpu(dev("0"), full - 500 * MiB), Gpu(dev("1"), full - 100 * MiB)]
    assert plan(TEXT, gpus).layout == cuda(("1", [0, 1, 2, 3, 4]))
    gpus = [Gpu(dev("0"), full - 100 * MiB), Gpu(dev("1"), full - 500 * MiB)]
    assert plan(TEXT, gpus).layout == cuda(("0", [0, 1, 2, 3, 4]))


VISION = FakeModel(projector=300 * MiB, projector_graph=100 * MiB)


def test_vision_projector_on_the_gpu_with_the_layers():
    done = plan(VISION, [card("0", 850 * MiB)])
    assert done.layout == cuda(("0", [0, 1, 2, 3, 4]), projector="0")
    # with 449 MiB left once the projector is there, the output layer goes to the CPU
    assert plan(VISION, [card("0", 849 * MiB)]).layout == cuda(("0", [0, 1, 2, 3]), projector="0")


def test_vision_projector_without_room_stays_on_the_cpu():
    big = FakeModel(projector=2 * GiB, projector_graph=100 * MiB)
    done = plan(big, [card("0", 450 * MiB)])
    assert done.layout == cuda(("0", [0, 1, 2, 3, 4]))
    assert done.layout.projector is None
    assert done.note == (
        "5/5 layers on CUDA0; the vision projector stays on the CPU "
        "(no GPU has 2.1 GiB left for it)"
    )


def test_num_gpu_caps_the_layers():
    assert plan(TEXT, [card("0", 8 * GiB)], LayoutOptions(num_gpu=2)).layout == cuda(("0", [2, 3]))
    done = plan(TEXT, [card("0", 8 * GiB)], LayoutOptions(num_gpu=5))
    assert done.layout == cuda(("0", [0, 1, 2, 3, 4]))


def test_num_gpu_past_memory_is_planned_as_asked():
    """The user asked: the plan is not second-guessed from the file; the runner's start is what
    says whether it fits (test_load_fit: a start out of memory runs on the CPU)."""
    done = plan(TEXT, [card("0", 250 * MiB)], LayoutOptions(num_gpu=5))
    assert done.layout == cuda(("0", [0, 1, 2, 3, 4]))
    # without num_gpu the same GPU takes what fits
    assert plan(TEXT, [card("0", 250 * MiB)]).layout == cuda(("0", [2, 3]))


def test_main_gpu_is_used_first():
    gpus = [card("0", 8 * GiB), card("1", 1 * GiB)]
    assert plan(TEXT, gpus).layout == cuda(("0", [0, 1, 2, 3, 4]))
    assert plan(TEXT, gpus, LayoutOptions(main_gpu=1)).layout == cuda(("1", [0, 1, 2, 3, 4]))
    done = plan(VISION, gpus, LayoutOptions(main_gpu=1))
    assert done.layout == cuda(("1", [0, 1, 2, 3, 4]), projector="1")


def test_main_gpu_that_does_not_exist_is_ignored_and_said():
    """As Ollama: its option defaults hold main_gpu 0, which a machine without a GPU must take."""
    gpus = [card("0", GiB), card("1", 8 * GiB)]
    done = plan(TEXT, gpus, LayoutOptions(main_gpu=2))
    assert done.layout == cuda(("1", [0, 1, 2, 3, 4]))  # the default order: most free first
    assert done.note.endswith("; main_gpu 2 ignored (2 GPUs found, numbered from 0)")
    done = plan(TEXT, [], LayoutOptions(main_gpu=0))
    assert done.layout == Layout()
    assert (
        done.note
        == "no GPU found: running on the CPU; main_gpu 0 ignored (0 GPUs found, numbered from 0)"
    )


@pytest.mark.parametrize("split", [(0, 0), (-1, 2), (1, 1, 1)])
def test_bad_tensor_split_is_refused(split):
    with pytest.raises(LayoutRequestError, match="tensor_split"):
        plan(TEXT, [card("0", GiB), card("1", GiB)], LayoutOptions(tensor_split=split))


def test_gpu_overhead_is_kept_free():
    done = plan(TEXT, [card("0", 450 * MiB)], LayoutOptions(overhead=100 * MiB))
    assert done.layout == cuda(("0", [1, 2, 3]))
    assert ServerConfig.from_env({"HEARTH_GPU_OVERHEAD": str(100 * MiB)}).gpu_overhead == 100 * MiB
    assert ServerConfig.from_env({}).gpu_overhead == 0


def test_gpus_of_two_libraries_are_not_mixed():
    gpus = [card("0", 300 * MiB, "CUDA"), card("0", 150 * MiB, "Vulkan")]
    assert plan(TEXT, gpus).layout == cuda(("0", [1, 2, 3]))


def test_other_models_loaded_and_a_partial_fit_asks_for_eviction():
    with pytest.raises(LoadRequiresEviction):
        plan(TEXT, [card("0", 250 * MiB)], LayoutOptions(require_full=True))
    assert plan(TEXT, [card("0", 450 * MiB)], LayoutOptions(require_full=True)).layout == cuda(
        ("0", [0, 1, 2, 3, 4])
    )


def test_too_large_for_every_device_is_refused_before_loading_with_the_numbers():
    # GPU: 250 MiB usable holds blocks 2-3 (200 MiB) and its graph (200 MiB); the CPU would need
    # input 30 + graph 200 + blocks 0-1 (200) + output (50) = 480 MiB with 100 MiB free, no swap.
    tight = SystemMemory(total=GiB, free=100 * MiB, free_swap=0)
    gpus = [Gpu(dev("0"), context("CUDA") + GRAPH + 250 * MiB, name="Fake 1")]
    with pytest.raises(ModelTooLarge) as caught:
        plan(TEXT, gpus, system=tight)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == (
        "the model is too large for this machine: it needs 880.0 MiB (922746880 bytes) with "
        "2/5 layers on CUDA0; system memory needs 480.0 MiB (503316480 bytes) and has "
        "100.0 MiB (104857600 bytes) available (100.0 MiB free + 0 B swap); "
        "CUDA0 (Fake 1) takes 400.0 MiB (419430400 bytes) and has 450.0 MiB (471859200 bytes) "
        "available (1.1 GiB free, less 660.0 MiB kept for the driver)"
    )


def test_no_gpu_and_too_little_ram_is_refused_with_the_numbers():
    # input 30 + graph 200 + layers 450 = 680 MiB; 400 MiB free + 50 MiB swap
    tight = SystemMemory(total=GiB, free=400 * MiB, free_swap=50 * MiB)
    with pytest.raises(ModelTooLarge, match=r"system memory needs 680\.0 MiB \(713031680 bytes\)"):
        plan(TEXT, [], system=tight)


def test_options_from_a_request():
    assert LayoutOptions.from_request({}) == LayoutOptions()
    given = {"num_gpu": 3, "main_gpu": 1, "temperature": 0}
    assert LayoutOptions.from_request(given) == LayoutOptions(num_gpu=3, main_gpu=1)
    assert LayoutOptions.from_request({"num_gpu": None, "main_gpu": None}) == LayoutOptions()


# ---- part 3: the search's rules for several GPUs ----------------------------------------------


def search(model: FakeModel, gpus: Sequence[Gpu], options: LayoutOptions = LayoutOptions()):
    return plan_layout(gpus, ROOMY, model.on_every_gpu(gpus), options)


def test_layout_is_canonical():
    a = Layout.of([(dev("1"), [4, 3]), (dev("0"), [0, 1, 2]), (dev("2"), [])])
    b = Layout.of([(dev("0"), [2, 1, 0]), (dev("1"), [3, 4])])
    assert a == b and hash(a) == hash(b)
    assert a.gpus[0].device == dev("0") and a.offloaded == 5
    assert a.describe(6) == "5/6 layers on CUDA0, CUDA1"
    assert Layout().describe(6) == "CPU only"


def test_two_gpus_of_unequal_size():
    # 300 and 150 MiB usable with their graphs: 450 MiB of layers need both, the larger GPU
    # takes the first blocks, the smaller one the last block and the output layer.
    done = search(TEXT, [card("0", 300 * MiB), card("1", 150 * MiB)])
    assert done.layout == cuda(("0", [0, 1, 2]), ("1", [3, 4]))
    assert done.note == "5/5 layers on CUDA0, CUDA1"
    layout = done.layout
    assert layout.device_of(TEXT.blocks) == layout.device_of(TEXT.blocks - 1) == dev("1")


def test_three_gpus_of_unequal_size():
    # 8 blocks (800 MiB) + output (50): 400 + 300 + 100 MiB usable hold the blocks exactly but
    # not the output layer, which stays on the CPU.
    model = FakeModel(blocks=8)
    gpus = [card("a", 300 * MiB), card("b", 100 * MiB), card("c", 400 * MiB)]
    assert search(model, gpus).layout == cuda(("c", [0, 1, 2, 3]), ("a", [4, 5, 6]), ("b", [7]))


def test_vision_projector_takes_the_first_gpu_with_room():
    # The larger card (CUDA1, 500 MiB usable) takes the 400 MiB projector first; the layers
    # then spread over the 100 MiB left there and CUDA0's 350 MiB.
    gpus = [card("0", 350 * MiB), card("1", 500 * MiB)]
    assert search(VISION, gpus).layout == cuda(("1", [0]), ("0", [1, 2, 3, 4]), projector="1")


def test_tensor_split_shares_the_layers():
    # Shares 1:3 of 450 MiB: the smallest factor that places every layer gives CUDA1 the last
    # three blocks and the output (350 MiB <= 1.04 x 337.5), CUDA0 block 0.
    gpus = [card("0", 8 * GiB), card("1", 8 * GiB)]
    done = search(TEXT, gpus, LayoutOptions(tensor_split=(1, 3)))
    assert done.layout == cuda(("0", [0]), ("1", [1, 2, 3, 4]))
    done = search(TEXT, gpus, LayoutOptions(tensor_split=(1, 1)))
    assert done.layout == cuda(("0", [0, 1]), ("1", [2, 3, 4]))
    done = search(TEXT, gpus, LayoutOptions(tensor_split=(0, 1)))
    assert done.layout == cuda(("1", [0, 1, 2, 3, 4]))


def test_tensor_split_is_capped_by_memory():
    # 1:1 asks 225 MiB of each, but CUDA0 holds 100 MiB: it takes one block (its cap), and the
    # smallest factor that still places every layer (350 MiB <= 1.56 x 225) gives CUDA1 the rest.
    gpus = [card("0", 100 * MiB), card("1", 8 * GiB)]
    done = search(TEXT, gpus, LayoutOptions(tensor_split=(1, 1)))
    assert done.layout == cuda(("0", [0]), ("1", [1, 2, 3, 4]))


def test_a_gpu_missing_from_the_report_gets_nothing():
    # The larger GPU is missing from the report (it holds no layers there): only the
    # other one is planned, and its 128 MiB take two of the three layers (the blocks).
    report = cpu_report(L3x50, [G0_128])
    plan = plan_layout([G0_128, G1_256], OLLAMA_SYSTEM, report)
    assert plan.layout == lay(("gpu0", [0, 1]))


def test_gpus_up_to_the_last_holding_layers_stay_in_use():
    # gpu0 alone could hold the three layers, but the last plan put layer 2 and a graph (10 MiB)
    # on gpu1: both stay in use, so plans do not swing. The smallest factor that places the
    # three layers gives gpu1 (118 MiB usable) one layer and gpu0 the first two.
    G1_128 = gpu("gpu1", 128 * MiB + MIN)
    zeros = (0,) * 3
    report = MemoryReport(
        cpu=DeviceMemory((50 * MiB, 50 * MiB, 0), zeros),
        gpus={
            G0_256.device: DeviceMemory(zeros, zeros),
            G1_128.device: DeviceMemory((0, 0, 50 * MiB), zeros, 10 * MiB),
        },
    )
    plan = plan_layout([G0_256, G1_128], OLLAMA_SYSTEM, report)
    assert plan.layout == lay(("gpu0", [0, 1]), ("gpu1", [2]))
    assert plan.gpu_bytes == {G0_256.device: 100 * MiB, G1_128.device: 60 * MiB}
    assert plan.cpu_bytes == 0
    # A graph alone (the file's plan charges every GPU one) keeps no GPU in use: gpu0 suffices.
    charged = MemoryReport(
        cpu=DeviceMemory((50 * MiB,) * 3, zeros),
        gpus={device: DeviceMemory(zeros, zeros, 10 * MiB) for device in report.gpus},
    )
    assert plan_layout([G0_256, G1_128], OLLAMA_SYSTEM, charged).layout == lay(("gpu0", [0, 1, 2]))
