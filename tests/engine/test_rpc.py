"""Layers placed on ggml RPC workers (`hearth worker` processes on loopback) compute the same
logits as the CPU-only run, and each device holds exactly the bytes of the layers given to it
(counted independently from the GGUF file with the `gguf` reader)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader
from rpc_workers import start_workers

from hearth.engine.forward import ForwardEngine
from hearth.engine.input import PassInput
from hearth.engine.ml import rpc
from hearth.engine.ml.placement import DevicePlacement, PlacementError
from hearth.plugins.registry import load_installed_model as load_model
from hearth.runner.layout_option import device_memory

from tiny_models import tiny_llama, write_tiny_llama

pytestmark = pytest.mark.skipif(not rpc.available(), reason="ggml built without GGML_RPC")


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    with start_workers(2) as endpoints:
        yield rpc.add_servers(endpoints)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("rpc") / "llama.gguf", tiny_llama(layers=4))


def _logits(path, placement: DevicePlacement | None) -> tuple[np.ndarray, dict]:
    loaded = load_model(path, num_threads=1, placement=placement)
    engine = ForwardEngine(loaded, num_ctx=128, num_batch=32)
    try:
        ids = np.random.default_rng(3).integers(3, 200, 40)
        n = len(ids)
        # 40 prompt tokens in two passes of 32 + 8, then 3 single-token steps
        engine.forward(PassInput(ids[:32], np.arange(32), np.zeros(32, int), np.array([31])))
        rows = [
            engine.forward(
                PassInput(ids[32:], np.arange(32, n), np.zeros(n - 32, int), np.array([7]))
            )
        ]
        for step, t in enumerate([5, 9, 11]):
            pos = n + step
            rows.append(
                engine.forward(
                    PassInput(np.array([t]), np.array([pos]), np.array([0]), np.array([0]))
                )
            )
        return np.concatenate(rows), device_memory(loaded, engine)
    finally:
        engine.close()
        loaded.close()


def _layer_bytes(path, blocks: set[int], output: bool) -> tuple[int, int]:
    """Bytes and count of the tensors of `blocks` (and the output layer's)."""

    def counted(name: str) -> bool:
        if name.startswith("blk."):
            return int(name.split(".")[1]) in blocks
        return output and name in ("output.weight", "output_norm.weight")

    sizes = [int(t.n_bytes) for t in GGUFReader(path).tensors if counted(t.name)]
    return sum(sizes), len(sizes)


def test_layers_on_two_workers_give_the_cpu_logits(workers, model_path) -> None:
    first, second = workers
    cpu, cpu_memory = _logits(model_path, None)
    # block 0 on the first worker, blocks 2-3 and the output layer (index 4) on the second;
    # block 1 stays on the CPU: activations cross devices three times each pass.
    placement = DevicePlacement({first: (0,), second: (2, 3, 4)})
    placed, memory = _logits(model_path, placement)
    print(f"\nmax |logit diff| CPU vs RPC: {np.abs(cpu - placed).max():.3g}")
    np.testing.assert_allclose(placed, cpu, rtol=0, atol=1e-5 * np.abs(cpu).max())
    assert set(cpu_memory) == {"CPU"}
    # A device buffer pads each tensor to the device's alignment (32 bytes over RPC).
    want_first, n_first = _layer_bytes(model_path, {0}, output=False)
    want_second, n_second = _layer_bytes(model_path, {2, 3}, output=True)
    assert want_first <= memory[first]["weights"] < want_first + 32 * n_first
    assert want_second <= memory[second]["weights"] < want_second + 32 * n_second
    # KV cache: one quarter of the model's cache per block, on the block's device
    cache = cpu_memory["CPU"]["cache"]
    assert memory[first]["cache"] == cache // 4
    assert memory[second]["cache"] == cache // 2
    assert memory["CPU"]["cache"] == cache // 4
    assert memory[first]["graph"] > 0 and memory[second]["graph"] > 0


def test_unknown_device_is_a_sentence(model_path) -> None:
    with pytest.raises(PlacementError, match="CUDA7"):
        load_model(model_path, placement=DevicePlacement({"CUDA7": (0,)}))


def test_layout_json_round_trip() -> None:
    p = DevicePlacement.from_json(
        {"gpus": [{"device": "RPC0", "layers": [2, 0, 1]}], "projector": None}
    )
    assert (
        p.layers == {"RPC0": (0, 1, 2)} and p.device_of_tensor("blk.1.attn_q.weight", 3) == "RPC0"
    )
    assert p.device_of_tensor("output.weight", 3) is None  # output layer (3) not placed
    assert p.device_of_tensor("token_embd.weight", 3, matmul=False) is None
    with pytest.raises(PlacementError):
        DevicePlacement.from_json({"gpus": [{"device": "RPC0"}]})


def test_a_graph_reused_after_another_ran_gives_the_cpu_logits(workers, model_path) -> None:
    """A decode graph built for one prompt, reused after the next prompt's graph ran: the
    scheduler split it across devices (pointing its nodes at copies it then freed), so it must
    be split again from its own sources. It crashed the worker (and a CUDA GPU: an illegal
    address in set_rows) before `_pin_sources`."""

    def turns(placement: DevicePlacement | None) -> np.ndarray:
        loaded = load_model(model_path, num_threads=1, placement=placement)
        engine = ForwardEngine(loaded, num_ctx=128, num_batch=32)
        rows = []
        try:
            for prompt in ([1, 10, 11, 12, 13, 14], [1, 20, 21, 22, 23]):
                engine.cache.remove(0, 0)
                n = len(prompt)
                seq, last = np.zeros(n, int), np.array([n - 1])
                rows.append(engine.forward(PassInput(np.array(prompt), np.arange(n), seq, last)))
                for k in range(3):  # the same decode graph in both turns
                    pos = np.array([n + k])
                    rows.append(
                        engine.forward(PassInput(np.array([5]), pos, np.array([0]), np.array([0])))
                    )
            assert engine.graphs_reused >= 4
            return np.concatenate(rows)
        finally:
            engine.close()
            loaded.close()

    first, _ = workers
    cpu = turns(None)
    placed = turns(DevicePlacement({first: (0, 1, 2, 3, 4)}))
    np.testing.assert_allclose(placed, cpu, rtol=0, atol=1e-5 * np.abs(cpu).max())


def test_a_tied_output_layer_on_a_device_is_planned_with_its_embedding_copy(workers, tmp_path):
    """Gemma 3's output reads the token embedding (no output.weight): on a device the engine
    holds a copy of it there. The service's plan for that layout (fit.py, from the file) names
    the bytes the runner then allocates on the device (tensor padding aside)."""
    from hearth.server.scheduling.layout import DeviceId, Layout
    from hearth.server.scheduling.layout.fit import fit_report, placed_report, read_file_layers

    from tiny_models import write_tiny_gemma3

    path = write_tiny_gemma3(tmp_path / "tied.gguf", layers=6)
    tensors = {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}
    assert "output.weight" not in tensors
    layers = read_file_layers(path)
    assert layers.tied_output == tensors["token_embd.weight"]

    first, _ = workers
    loaded = load_model(path, num_threads=1, placement=DevicePlacement({first: tuple(range(7))}))
    engine = ForwardEngine(loaded, num_ctx=128, num_batch=32)
    try:
        held = device_memory(loaded, engine)[first]["weights"]
    finally:
        engine.close()
        loaded.close()
    device = DeviceId("RPC", first.removeprefix("RPC"))
    planned = placed_report(fit_report(layers, cells=128), Layout.of([(device, range(7))]))
    on_device = sum(planned.gpus[device].weights)
    on_device_tensors = sum(1 for name in tensors if not name.startswith("token_embd")) + 1
    assert on_device <= held < on_device + 32 * on_device_tensors
    assert on_device - layers.tied_output < held  # without the copy the plan fell short
    cpu_only = placed_report(fit_report(layers, cells=128), Layout())
    assert sum(cpu_only.cpu.weights) == sum(layers.blocks) + layers.output  # no copy on the CPU


def test_greedy_passes_pick_on_the_device_that_holds_the_output_layer(workers, model_path):
    """The output layer on a worker: greedy passes pick in the graph (engine/greedy.py), and
    their ids are the argmax of the logits a plain pass returns."""
    loaded = load_model(model_path, num_threads=1, placement=DevicePlacement({workers[0]: (3, 4)}))
    engine = ForwardEngine(loaded, num_ctx=128, num_batch=32)
    try:
        assert engine.greedy_on_backend
        ids = np.random.default_rng(4).integers(3, 200, 20)
        engine.forward(PassInput(ids, np.arange(20), np.zeros(20, int), np.array([19])))
        tok = 5
        for pos in range(20, 40):
            one = PassInput(np.array([tok]), np.array([pos]), np.array([0]), np.array([0]))
            logits = engine.forward(one)
            engine.cache.remove(0, pos)
            one.greedy = True
            picked = engine.forward(one)
            assert picked.tolist() == [int(logits[0].argmax())]
            tok = int(picked[0])
    finally:
        engine.close()
        loaded.close()
