"""The service's layout in llama.cpp's model parameters (`hearth.llamacpp.layout`), and
a layout naming a device this CPU-only llama.cpp lacks: the runner's load fails with that
sentence (the scheduler then starts the model on the CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hearth.engine.gguf import GGUFFile
from hearth.engine.ml.placement import DevicePlacement
from hearth.llamacpp.layout import LlamaCppLayoutError, LlamaCppSplit, llamacpp_split

BLOCKS = 8  # layers 0..7, and 8 the output layer


def _placement(**layers: list[int]) -> DevicePlacement:
    return DevicePlacement({d: tuple(ls) for d, ls in layers.items()})


def _llamacpp_device(split: LlamaCppSplit, layer: int) -> int | None:
    """llama.cpp's own rule (llama-model.cpp, load_tensors): the GPU of `layer`, or None."""
    start = BLOCKS + 1 - split.n_gpu_layers
    if layer < start:
        return None
    total = sum(split.tensor_split)
    cumulative, fractions = 0.0, []
    for weight in split.tensor_split:
        cumulative += weight
        fractions.append(cumulative / total)
    where = (layer - start) / split.n_gpu_layers
    return next(i for i, f in enumerate(fractions) if f > where)  # std::upper_bound


def test_no_layout_is_the_cpu() -> None:
    assert llamacpp_split(DevicePlacement(), BLOCKS, ["CUDA0"]) == LlamaCppSplit(0, "none")


def test_one_gpu_counts_the_output_layer() -> None:
    split = llamacpp_split(_placement(CUDA0=[5, 6, 7, 8]), BLOCKS, ["CUDA0"])
    assert split == LlamaCppSplit(4, "layer", (4.0,), 0)
    output_only = llamacpp_split(_placement(CUDA0=[8]), BLOCKS, ["CUDA0"])
    assert output_only.n_gpu_layers == 1


@pytest.mark.parametrize(
    ("layers", "devices"),
    [
        ({"CUDA0": [2, 3, 4], "CUDA1": [5, 6, 7, 8]}, ["CUDA0", "CUDA1"]),
        ({"CUDA1": [0, 1, 2, 3, 4, 5, 6], "CUDA2": [7, 8]}, ["CUDA0", "CUDA1", "CUDA2"]),
        ({"CUDA0": [8], "Vulkan0": []}, ["CUDA0", "Vulkan0"]),
        ({"CUDA0": [1], "CUDA1": list(range(2, 9))}, ["CUDA0", "CUDA1"]),
    ],
)
def test_tensor_split_gives_each_device_its_layers(
    layers: dict[str, list[int]], devices: list[str]
) -> None:
    placement = _placement(**layers)
    split = llamacpp_split(placement, BLOCKS, devices)
    assert split.split_mode == "layer"
    assert len(split.tensor_split) == len(devices)
    for layer in range(BLOCKS + 1):
        index = _llamacpp_device(split, layer)
        assert (devices[index] if index is not None else None) == placement.device_of_layer(layer)
    assert devices[split.main_gpu] == placement.device_of_layer(BLOCKS)


@pytest.mark.parametrize(
    ("layers", "devices", "sentence"),
    [
        (
            {"CUDA0": [7, 8]},
            [],
            "the layout places layers on CUDA0, which llama.cpp does not have here "
            "(its GPU devices: none: it runs on the CPU only)",
        ),
        (
            {"CUDA0": [3, 4]},
            ["CUDA0"],
            "llama.cpp offloads the last layers only (with the output layer); this layout "
            "places layers 3-4 of 0..8",
        ),
        (
            {"CUDA1": [5, 6], "CUDA0": [7, 8]},
            ["CUDA0", "CUDA1"],
            "llama.cpp gives lower layers to lower-numbered devices (CUDA0, CUDA1); this "
            "layout places them otherwise",
        ),
        (
            {"CUDA0": [9]},
            ["CUDA0"],
            "the layout places layer 9 on CUDA0, but the model has layers 0..8 "
            "(the last is the output layer)",
        ),
    ],
)
def test_layouts_llamacpp_cannot_follow(
    layers: dict[str, list[int]], devices: list[str], sentence: str
) -> None:
    with pytest.raises(LlamaCppLayoutError) as e:
        llamacpp_split(_placement(**layers), BLOCKS, devices)
    assert str(e.value) == sentence


def test_a_layout_naming_cuda0_fails_the_load_with_a_sentence(tiny_llama_path: Path) -> None:
    """This llama.cpp build is CPU-only: the runner (its own process) reports the error
    event the scheduler falls back on."""
    with GGUFFile(tiny_llama_path) as f:
        blocks = f.metadata.uint("block_count")
    layout = {"gpus": [{"device": "CUDA0", "layers": [blocks]}], "projector": None}
    command = [sys.executable, "-m", "hearth", "runner", "--model", str(tiny_llama_path)]
    command += ["--engine", "llamacpp", "--num-ctx", "64", "--layout", json.dumps(layout)]
    env = dict(os.environ, HEARTH_RUNNER_TOKEN="t")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = {k: v for k, v in events[-1].items() if k != "refused"}  # (whether auto may switch)
    assert last == {
        "event": "error",
        "message": f"{tiny_llama_path.name}: the layout places layers on CUDA0, which "
        "llama.cpp does not have here (its GPU devices: none: it runs on the CPU only)",
    }
