"""The layout planned before a runner starts (issue 13): the FIT report computed from the model
file, checked against an independent count (gguf's GGUFReader, the KV formula), and the
scheduler refusing a model too large for every device before starting a runner (in process on
a simulated 1 GiB machine, and through a live `hearth serve` with the Ollama client)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import ollama
import pytest
from gguf import GGUFReader

from hearth.plugins.testing import TinyTransformer, write_tiny_model
from hearth.server.config import ServerConfig
from hearth.server.scheduling.layout import (
    DeviceId,
    Gpu,
    ModelTooLarge,
    SystemMemory,
    plan_from_file,
)
from hearth.server.scheduling.layout.fit import fit_report, read_file_layers
from hearth.server.scheduling.load_layout import Placed, Placement, layout_json
from hearth.server.scheduling.records import LoadSpec
from hearth.server.scheduling.runner_process import RunnerOptions
from hearth.server.scheduling.scheduler import Scheduler

from .fakes import FakeLauncher, LiveServer, start_server, stop_server

GiB = 1 << 30


def gguf_counts(path: Path, blocks: int) -> tuple[list[int], int, int]:
    """(weight bytes per block, output layer, everything else) read with gguf's reader."""
    reader = GGUFReader(path)
    per_block = [0] * blocks
    output = other = 0
    for t in reader.tensors:
        n = int(t.n_bytes)
        if t.name.startswith("blk."):
            per_block[int(t.name.split(".")[1])] += n
        elif t.name in ("output.weight", "output_norm.weight"):
            output += n
        else:
            other += n
    return per_block, output, other


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TinyTransformer]:
    spec = TinyTransformer(layers=3, heads=4, kv_heads=2, embd=128, rope_freqs=True)
    return write_tiny_model(tmp_path_factory.mktemp("fit") / "small.gguf", spec), spec


@pytest.mark.parametrize(("kv_type", "element"), [("f16", 2.0), ("q8_0", 34 / 32)])
def test_fit_report_counts_each_layer_as_the_file_and_the_kv_formula_do(small, kv_type, element):
    path, spec = small
    blocks, output, other = gguf_counts(path, spec.layers)
    assert all(blocks) and output and other  # the model has all three kinds
    num_ctx, parallel = 1000, 3
    report = fit_report(read_file_layers(path), num_ctx * parallel, kv_type, graph=12345)
    head_dim = spec.embd // spec.heads
    kv = int(num_ctx * parallel * spec.kv_heads * head_dim * 2 * element)  # K and V per block
    assert report.layers == spec.layers + 1
    assert report.cpu.weights == (*blocks, output)
    assert report.cpu.cache == (kv,) * spec.layers + (0,)
    assert report.input_weights == other
    assert report.cpu.graph == 12345 and not report.vision and report.gpus == {}
    total = sum(blocks) + output + other
    assert total == sum(int(t.n_bytes) for t in GGUFReader(path).tensors)


def test_a_sliding_window_model_counts_its_blocks_at_most_at_the_window(tmp_path):
    """Which blocks slide is the plugin's knowledge, so each is counted at the window: a lower
    bound that never refuses a long-context model that fits."""
    spec = TinyTransformer(layers=2, heads=4, kv_heads=2, embd=64)
    spec.metadata["attention.sliding_window"] = 512
    layers = read_file_layers(write_tiny_model(tmp_path / "swa.gguf", spec))
    per_cell = spec.kv_heads * (spec.embd // spec.heads) * 2 * 2  # K and V, F16
    assert fit_report(layers, 100_000).cpu.cache == (512 * per_cell,) * 2 + (0,)
    assert fit_report(layers, 300).cpu.cache == (300 * per_cell,) * 2 + (0,)


def write_one_file_vision(path: Path) -> Path:
    """A GGUF in Ollama's one-file vision layout: two text blocks, a tied output (no
    output.weight), and the image encoder and projector (`v.*`, `mm.*`) in the same file."""
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_embedding_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    shapes = {
        "token_embd.weight": (100, 64),
        "blk.0.attn_q.weight": (64, 64),
        "blk.1.attn_q.weight": (64, 64),
        "output_norm.weight": (64,),
        "v.patch_embd.weight": (48, 96),
        "v.blk.0.attn_q.weight": (96, 96),
        "v.post_layernorm.weight": (96,),
        "mm.input_projection.weight": (96, 64),
    }
    for name, shape in shapes.items():
        w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_one_file_vision_model_s_encoder_is_its_projector(tmp_path):
    """Ollama's one-file layout keeps the image encoder beside the text model: its tensors are
    the projector the search places on a GPU (not input weights left on the CPU), counted when
    the model encodes images with them; the layout names that GPU for the runner."""
    path = write_one_file_vision(tmp_path / "vision.gguf")
    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}
    encoder = sum(n for name, n in sizes.items() if name.startswith(("v.", "mm.")))
    layers = read_file_layers(path)
    assert layers.encoder == encoder
    assert layers.tied_output == sizes["token_embd.weight"]
    seeing = fit_report(layers, 64, encoder=True)
    assert seeing.vision and seeing.projector == encoder
    assert seeing.input_weights == sizes["token_embd.weight"]
    assert fit_report(layers, 64, projector=1000, encoder=True).projector == encoder + 1000
    blind = fit_report(layers, 64)  # a plugin without an image encoder loads none of it
    assert not blind.vision and blind.projector == 0
    assert blind.input_weights == sizes["token_embd.weight"]
    gpu = Gpu(DeviceId("CUDA", "0"), 8 * GiB)
    done = plan_from_file([gpu], SystemMemory(total=8 * GiB, free=4 * GiB), seeing)
    assert done.layout.projector == gpu.device and done.layout.offloaded == 3
    assert json.loads(layout_json(done.layout) or "{}")["projector"] == "CUDA0"


def test_fit_report_refuses_nonsense(small):
    layers = read_file_layers(small[0])
    with pytest.raises(ValueError, match="K/V cache type"):
        fit_report(layers, 10, "q5_1")
    with pytest.raises(ValueError, match="at least one cell"):
        fit_report(layers, 0)


# -- the scheduler on a simulated machine --------------------------------------------------


def load_spec(path: Path, name: str, num_ctx: int) -> LoadSpec:
    def fit(options: RunnerOptions):
        cells = options.num_ctx * options.parallel
        return fit_report(read_file_layers(path), cells, options.kv_type)

    return LoadSpec(key=name, path=str(path), name=name, digest="d" * 8,
                    options=RunnerOptions(num_ctx=num_ctx), fit=fit)  # fmt: skip


def needed(path: Path, spec: TinyTransformer, num_ctx: int) -> int:
    """The all-CPU bytes of the small model at `num_ctx` (f16 cache), counted independently."""
    weights = sum(int(t.n_bytes) for t in GGUFReader(path).tensors)
    return weights + spec.layers * num_ctx * spec.kv_heads * (spec.embd // spec.heads) * 2 * 2


def test_a_model_too_large_for_the_machine_is_refused_before_a_runner_starts(small, caplog):
    path, spec = small
    huge = 1 << 21  # 1.5 GiB of KV cache on a machine with 1 GiB free and no swap
    free = {"bytes": GiB}
    launcher = FakeLauncher()

    async def go() -> None:
        placement = Placement(system=lambda: SystemMemory(GiB, free["bytes"], 0))
        s = Scheduler(ServerConfig(), launcher, placement=placement)
        with pytest.raises(ModelTooLarge) as refused:
            await s.acquire(load_spec(path, "huge:latest", huge), 60)
        message = str(refused.value)
        assert message.startswith("huge:latest cannot be loaded: the model is too large")
        assert f"({needed(path, spec, huge)} bytes)" in message  # needed
        assert f"({GiB} bytes) available" in message  # available
        assert launcher.started == []
        # A model that fits loads, and the log says where it runs.
        with caplog.at_level(logging.INFO, logger="hearth.scheduler"):
            (await s.acquire(load_spec(path, "small:latest", 2048), 60)).release()
        assert len(launcher.started) == 1
        line = "layout for small:latest: 0/4 layers on GPU (no GPU found): running on the CPU"
        assert line in caplog.messages
        # Too large even if the loaded model were unloaded: refused, nothing unloaded.
        with pytest.raises(ModelTooLarge, match="unloading the other models would free"):
            await s.acquire(load_spec(path, "huge:latest", huge), 60)
        assert launcher.stopped == [] and len(launcher.started) == 1
        await s.close()

    asyncio.run(go())


def test_a_model_that_fits_once_another_is_unloaded_unloads_it(small):
    path, spec = small
    launcher = FakeLauncher()
    # The fake runner holds 1300 bytes; the second model fits only once they are freed.
    base = needed(path, spec, 4096) - 1

    def system() -> SystemMemory:
        return SystemMemory(GiB, base + (1300 if launcher.stopped else 0), 0)

    async def go() -> None:
        s = Scheduler(ServerConfig(), launcher, placement=Placement(system=system))
        (await s.acquire(load_spec(path, "a:latest", 16), 60)).release()
        (await s.acquire(load_spec(path, "b:latest", 4096), 60)).release()
        assert [r.path for r in launcher.started] == [str(path)] * 2
        assert launcher.stopped == [launcher.started[0]]
        assert [e.spec.name for e in s.loaded()] == ["b:latest"]
        await s.close()

    asyncio.run(go())


def test_automatic_slots_that_do_not_fit_fall_back_to_one(small):
    path, spec = small
    launcher = FakeLauncher()
    one = needed(path, spec, 4096)  # room for one slot's cache, not for four

    async def go() -> None:
        placement = Placement(system=lambda: SystemMemory(GiB, one, 0))
        # The scheduler's own estimate (1 byte) would take four slots; the fit says no.
        s = Scheduler(ServerConfig(), launcher, lambda: 100 * GiB, placement)
        wanted = replace(load_spec(path, "a:latest", 4096), parallel_choices=((4, 1),))
        (await s.acquire(wanted, 60)).release()
        assert [r.options.parallel for r in launcher.started] == [1]
        reason = s.loaded()[0].spec.parallel_reason
        assert reason == "automatic: 4 slots do not fit in memory"
        await s.close()

    asyncio.run(go())


# -- through a live hearth serve -------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    live = start_server(tmp_path_factory.mktemp("fit-home"), None)
    yield live
    stop_server(live)


def runner_children(server: LiveServer) -> list[str]:
    """Command lines of the service's `hearth runner` child processes."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == server.proc.pid and " runner " in cmd:
            found.append(cmd)
    return found


def test_the_service_refuses_a_model_too_large_and_keeps_serving(server, tmp_path, small):
    # 4 blocks x 16 K/V heads x (256 + 256) x 2 bytes = 64 KiB per token: 1 TiB at 16M tokens.
    wide = TinyTransformer(layers=4, embd=64, heads=16, kv_heads=16, head_dim=256, ff=64,
                           context=1 << 24)  # fmt: skip
    huge_path = write_tiny_model(tmp_path / "wide.gguf", wide)
    oc = ollama.Client(host=server.url, timeout=120)
    for name, path in (("wide", huge_path), ("small", small[0])):
        oc.create(name, files={path.name: oc.create_blob(path)})
    with pytest.raises(ollama.ResponseError) as refused:
        oc.generate("wide", "hi", options={"num_ctx": 1 << 24, "num_predict": 1})
    assert refused.value.status_code == 507
    message = refused.value.error
    assert "wide:latest cannot be loaded: the model is too large for this machine" in message
    kv = 4 * (1 << 24) * 16 * 256 * 2 * 2
    weights = sum(int(t.n_bytes) for t in GGUFReader(huge_path).tensors)
    need = int(message.split(" bytes) with CPU only")[0].rsplit("(", 1)[1])
    assert 0 <= need - kv - weights < GiB  # weights + KV cache + the graph's estimate
    assert "bytes) available" in message
    assert runner_children(server) == [] and oc.ps().models == []
    answer = oc.generate("small", "One, two,", options={"num_predict": 3, "temperature": 0})
    assert answer.done and answer.eval_count
    assert [m.model for m in oc.ps().models] == ["small:latest"]
    log = server.log.read_text()
    assert "layout for small:latest: 0/4 layers on GPU (" in log and "running on the CPU" in log


def test_gpu_options_that_cannot_apply_are_ignored_not_an_error(server, small):
    """Ollama's option defaults hold main_gpu 0: a client that sends them to a machine without
    a GPU (or names a GPU past the last) gets its answer, and the log says what was ignored."""
    oc = ollama.Client(host=server.url, timeout=120)
    oc.create("plain", files={small[0].name: oc.create_blob(small[0])})
    for main_gpu in (0, 3):
        options = {"main_gpu": main_gpu, "num_gpu": -1, "num_predict": 2, "temperature": 0}
        answer = oc.generate("plain", "One, two,", options=options, keep_alive=0)
        assert answer.done and answer.eval_count
        assert f"main_gpu {main_gpu} ignored (0 GPUs found" in server.log.read_text()


def test_ps_reports_the_layout_the_placement_chose_per_device(small):
    """/api/ps: size_vram and the per-device breakdown come from the chosen layout's FIT report,
    checked against gguf's own tensor sizes and the KV formula."""
    from hearth.server.api.ollama.models import _ps_entry

    path, spec = small
    blocks, output, other = gguf_counts(path, spec.layers)
    kv = 2048 * spec.kv_heads * (spec.embd // spec.heads) * 2 * 2  # K and V per block, f16
    launcher = FakeLauncher()

    async def go() -> dict:
        placement = Placement(system=lambda: SystemMemory(GiB, GiB, 0))
        s = Scheduler(ServerConfig(), launcher, placement=placement)
        (await s.acquire(load_spec(path, "small:latest", 2048), 60)).release()
        (entry,) = s.loaded()
        out = _ps_entry(entry)
        await s.close()
        return out

    ps = asyncio.run(go())
    assert ps["size_vram"] == 0
    assert ps["hearth"]["layout"] == "CPU only"
    cpu = {"device": "CPU", "layers": spec.layers + 1, "weights": sum(blocks) + output + other,
           "cache": spec.layers * kv, "graph": 0}  # fmt: skip
    assert ps["hearth"]["devices"] == [cpu]
    assert ps["hearth"]["projector"] is None  # a text model has none


def test_device_usage_splits_a_gpu_layout_by_device():
    """What a layout with layers and the projector on a GPU puts on each device (hand-counted)."""
    from hearth.server.scheduling.layout import CPU, DeviceId, DeviceMemory, Layout, MemoryReport
    from hearth.server.scheduling.layout.usage import device_usage, gpu_bytes

    cuda = DeviceId("CUDA", "0")
    report = MemoryReport(
        cpu=DeviceMemory(weights=(10, 0, 0), cache=(1, 0, 0), graph=5),
        gpus={cuda: DeviceMemory(weights=(0, 20, 30), cache=(0, 2, 0), graph=7)},
        input_weights=100,
        vision=True,
        projector=1000,
        projector_graph=50,
    )
    layout = Layout.of([(cuda, (1, 2))], projector=cuda)
    cpu, gpu = device_usage(report, layout)
    assert (cpu.device, cpu.layers, cpu.weights, cpu.cache, cpu.graph) == (CPU, 1, 110, 1, 5)
    assert (gpu.device, gpu.layers, gpu.weights, gpu.cache, gpu.graph) == (cuda, 2, 1050, 2, 57)
    assert gpu_bytes(report, layout) == 1050 + 2 + 57
    assert gpu_bytes(report, Layout()) == 0
    (alone,) = device_usage(report, Layout())
    assert alone.weights == 10 + 100 + 1000 and alone.graph == 5 + 50 and alone.layers == 3
    # /api/ps names the projector's device, the CPU when the layout leaves it there
    assert Placed(layout, report, "2/3 layers on CUDA0").as_json()["projector"] == "CUDA0"
    assert Placed(Layout(), report, "CPU only").as_json()["projector"] == "CPU"
    with pytest.raises(ValueError, match="layers the model does not have"):
        device_usage(report, Layout.of([(cuda, (3,))]))


def test_ps_counts_the_slots_the_runner_started_with(small):
    """Four automatic slots planned, the start fails, one runs: /api/ps counts one slot's cache."""
    from hearth.server.api.ollama.models import _ps_entry

    path, spec = small
    kv = 2048 * spec.kv_heads * (spec.embd // spec.heads) * 2 * 2  # K and V per block, f16
    launcher = FakeLauncher(fail="out of memory")

    async def go() -> dict:
        placement = Placement(system=lambda: SystemMemory(GiB, GiB, 0))
        s = Scheduler(ServerConfig(), launcher, lambda: 100 * GiB, placement)
        wanted = replace(load_spec(path, "a:latest", 2048), parallel_choices=((4, 1),))
        (await s.acquire(wanted, 60)).release()
        out = _ps_entry(s.loaded()[0])
        await s.close()
        return out

    ps = asyncio.run(go())
    assert [r.options.parallel for r in launcher.started] == [1]
    assert ps["hearth"]["parallel"] == 1
    assert ps["hearth"]["devices"][0]["cache"] == spec.layers * kv


def test_a_gpu_layout_reaches_the_runner_and_a_failed_start_runs_on_the_cpu(small):
    """Simulated GPUs: the scheduler starts the runner with the layout the search chose (its
    `--layout`, with ggml's device names), falls back to the CPU when that start fails, honours
    num_gpu, and has the device report probed afresh after every start and stop."""
    from hearth.engine.ml.placement import DevicePlacement
    from hearth.server.scheduling.layout import DeviceId, Gpu, LayoutOptions

    path, spec = small
    gpus = [Gpu(DeviceId("CUDA", "0"), free=8 * GiB, total=8 * GiB, name="sim")]
    forgotten = []

    async def found() -> list[Gpu]:
        return gpus

    async def go(fail: str | None, num_gpu: int = -1) -> tuple[FakeLauncher, list, str]:
        launcher = FakeLauncher(fail=fail)
        placement = Placement(
            system=lambda: SystemMemory(GiB, GiB, 0), gpus=found, forget=lambda: forgotten.append(1)
        )
        s = Scheduler(ServerConfig(), launcher, lambda: 100 * GiB, placement)
        wanted = replace(
            load_spec(path, "a:latest", 2048), layout_options=LayoutOptions(num_gpu=num_gpu)
        )
        (await s.acquire(wanted, 60)).release()
        where = s.loaded()[0].placed.where  # type: ignore[union-attr]
        await s.close()
        return launcher, forgotten, where

    launcher, _, where = asyncio.run(go(None))
    layout = launcher.started[0].options.layout
    placement = DevicePlacement.from_json(json.loads(layout))
    assert placement.layers == {"CUDA0": tuple(range(spec.layers + 1))}  # blocks and output
    assert where == f"{spec.layers + 1}/{spec.layers + 1} layers on CUDA0"
    assert forgotten  # a start changes the GPUs' free memory

    launcher, _, where = asyncio.run(go("out of memory on CUDA0"))
    assert [r.options.layout for r in launcher.started] == [None]  # the retry: CPU only
    assert where == "CPU only"

    launcher, _, _ = asyncio.run(go(None, num_gpu=2))
    two = DevicePlacement.from_json(json.loads(launcher.started[0].options.layout))
    # the last two blocks; the output layer stays on the CPU (llama.cpp's n_gpu_layers rule)
    assert two.layers == {"CUDA0": (spec.layers - 2, spec.layers - 1)}


@pytest.mark.parametrize(
    "devices",
    [(("CUDA", "0"), ("CUDA", "1")), (("RPC", "0"), ("RPC", "1")), (("CUDA", "0"), ("RPC", "0"))],
    ids=["two GPUs", "two RPC workers", "a GPU and an RPC worker"],
)
def test_a_model_too_large_for_one_gpu_is_started_across_two(small, devices):
    """Two simulated GPUs (or RPC workers, or one of each), each with room for 3/4 of the
    model's layers: the runner starts with the layers spread over both, and /api/ps shows each
    one's share."""
    from hearth.engine.ml.placement import DevicePlacement
    from hearth.server.api.ollama.models import _ps_entry
    from hearth.server.scheduling.layout import DeviceId, Gpu

    path, spec = small
    layers = sum(fit_report(read_file_layers(path), 2048).layer_sizes())

    def free(device: DeviceId) -> int:  # its backend's context and 3/4 of the layers
        return Gpu(device, 0).minimum_memory + layers * 3 // 4

    gpus = [Gpu(DeviceId(*d), free=free(DeviceId(*d)), total=8 * GiB) for d in devices]

    async def found() -> list[Gpu]:
        return gpus

    async def go() -> tuple[FakeLauncher, dict]:
        launcher = FakeLauncher()
        placement = Placement(system=lambda: SystemMemory(GiB, GiB, 0), gpus=found)
        s = Scheduler(ServerConfig(), launcher, lambda: 100 * GiB, placement)
        (await s.acquire(load_spec(path, "a:latest", 2048), 60)).release()
        ps = _ps_entry(s.loaded()[0])
        await s.close()
        return launcher, ps

    launcher, ps = asyncio.run(go())
    placed = DevicePlacement.from_json(json.loads(launcher.started[0].options.layout))
    first, second = ("".join(device) for device in devices)
    assert set(placed.layers) == {first, second}
    assert sorted(i for ls in placed.layers.values() for i in ls) == list(range(spec.layers + 1))
    everything = spec.layers + 1
    assert ps["hearth"]["layout"] == f"{everything}/{everything} layers on {first}, {second}"
    devices = {d["device"]: d for d in ps["hearth"]["devices"]}
    assert devices["CPU"]["layers"] == 0 and devices["CPU"]["cache"] == 0
    assert devices[first]["layers"] + devices[second]["layers"] == everything
    assert ps["size_vram"] == layers


def test_layout_json_is_the_runner_s_layout_argument():
    """`--layout` on the wire: ggml's device names, the layers of each GPU, the projector's
    device; the runner reads it back to the same placement; None for the CPU."""
    from hearth.engine.ml.placement import DevicePlacement
    from hearth.server.scheduling.layout import DeviceId, Layout

    cuda0, rpc1 = DeviceId("CUDA", "0"), DeviceId("RPC", "1")
    layout = Layout.of([(rpc1, [3, 4]), (cuda0, [1, 2])], projector=cuda0)
    wire = layout_json(layout)
    assert wire == (
        '{"gpus":[{"device":"CUDA0","layers":[1,2]},{"device":"RPC1","layers":[3,4]}],'
        '"projector":"CUDA0"}'
    )
    back = DevicePlacement.from_json(json.loads(wire))
    assert back == DevicePlacement({"CUDA0": (1, 2), "RPC1": (3, 4)}, "CUDA0")
    assert layout_json(Layout(projector=cuda0)) == '{"gpus":[],"projector":"CUDA0"}'
    assert layout_json(Layout()) is None


def test_num_gpu_past_the_gpu_s_memory_is_started_as_planned_and_its_failure_runs_on_the_cpu(
    small, caplog
):
    """The plan from the file does not second-guess num_gpu: a GPU with too little free memory
    for one layer gets every layer asked for, the runner is started with that layout, and its
    own failure to allocate (the only real check) makes the scheduler start it again on the
    CPU."""
    from hearth.server.scheduling.layout import DeviceId, Gpu, LayoutOptions

    path, spec = small
    # 64 KiB usable beyond the driver's share: less than one layer's KV cache (0.5 MiB)
    free = Gpu(DeviceId("CUDA", "0"), 0).minimum_memory + (64 << 10)
    tiny = [Gpu(DeviceId("CUDA", "0"), free=free, total=8 * GiB, name="sim")]

    async def found() -> list[Gpu]:
        return tiny

    async def go(num_gpu: int, fail: str | None) -> tuple[FakeLauncher, str]:
        launcher = FakeLauncher(fail=fail)
        placement = Placement(system=lambda: SystemMemory(GiB, GiB, 0), gpus=found)
        s = Scheduler(ServerConfig(), launcher, lambda: 100 * GiB, placement)
        wanted = replace(
            load_spec(path, "a:latest", 2048), layout_options=LayoutOptions(num_gpu=num_gpu)
        )
        (await s.acquire(wanted, 60)).release()
        where = s.loaded()[0].placed.where  # type: ignore[union-attr]
        await s.close()
        return launcher, where

    # without num_gpu the plan keeps the model off that GPU, and the log says what it has
    with caplog.at_level(logging.INFO, logger="hearth.scheduler"):
        launcher, where = asyncio.run(go(-1, None))
    assert launcher.started[0].options.layout is None and where == "CPU only"
    assert (
        "layout for a:latest: 0/4 layers on GPU (not enough GPU memory for one layer and its "
        "compute graph (CUDA0 64.0 KiB usable)): running on the CPU"
    ) in caplog.messages
    # with it, the layout asked for reaches the runner
    everything = spec.layers + 1
    launcher, where = asyncio.run(go(everything, None))
    assert json.loads(launcher.started[0].options.layout)["gpus"] == [
        {"device": "CUDA0", "layers": list(range(everything))}
    ]
    assert where == f"{everything}/{everything} layers on CUDA0"
    # and when the runner cannot allocate it, the model runs on the CPU
    with caplog.at_level(logging.WARNING, logger="hearth.scheduler"):
        launcher, where = asyncio.run(go(everything, "CUDA0: out of memory"))
    assert [r.options.layout for r in launcher.started] == [None]
    assert where == "CPU only"
    assert any(
        m.startswith('a:latest did not start with its layout on {"gpus":[{"device":"CUDA0"')
        and m.endswith("(CUDA0: out of memory); starting it on the CPU")
        for m in caplog.messages
    ), caplog.messages


def test_a_model_that_fits_on_the_gpu_needs_no_room_in_ram(small):
    """System memory too small for the model, a simulated GPU with room: the model is neither
    refused nor the reason another one is unloaded, and it runs on the GPU."""
    from hearth.server.scheduling.layout import DeviceId, Gpu

    path, spec = small
    launcher = FakeLauncher()
    tight = needed(path, spec, 4096) // 2  # half of what the all-CPU load needs

    async def found() -> list[Gpu]:
        return [Gpu(DeviceId("CUDA", "0"), free=8 * GiB, total=8 * GiB)]

    async def go() -> tuple[list[str], int]:
        placement = Placement(system=lambda: SystemMemory(GiB, tight, 0), gpus=found)
        s = Scheduler(ServerConfig(), launcher, lambda: tight, placement)
        (await s.acquire(load_spec(path, "a:latest", 16), 60)).release()
        b = replace(load_spec(path, "b:latest", 4096), estimate=needed(path, spec, 4096))
        (await s.acquire(b, 60)).release()
        out = [e.placed.where for e in s.loaded() if e.placed]  # type: ignore[union-attr]
        stopped = len(launcher.stopped)
        await s.close()
        return out, stopped

    where, stopped = asyncio.run(go())
    assert stopped == 0 and len(where) == 2, "loading b unloaded a, though b fits on the GPU"
    assert where[1] == f"{spec.layers + 1}/{spec.layers + 1} layers on CUDA0"
