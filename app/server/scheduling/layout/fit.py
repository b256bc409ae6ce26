"""What a model takes in memory, computed by the service from the model file (nothing loaded,
nothing allocated): the report the layout is planned from (`planning.plan_from_file`).

The runner is not asked, and nothing is negotiated with it: the service plans every layout from
the file before the runner starts; the runner then allocates what `--layout` says, and a start
that runs out of memory on a device is retried on the CPU (the scheduler) -- the runner's real
allocation failure is the signal, which no estimate could replace. The all-CPU report is
arithmetic on the GGUF, which the service reads anyway:

* weights per layer: the bytes of the file's tensors, `blk.N.*` for block N, `output.*` and
  `output_norm.*` for the output layer (index `blocks`), everything else (the token embedding,
  rope factors, ...) as `input_weights`;
* KV cache per block: cells (`num_ctx x parallel`) x the block's K/V heads x (key length +
  value length) x the bytes of one element of the K/V type. A model with a sliding window
  (`attention.sliding_window`) has every block counted at most at the window: which blocks
  slide is the plugin's knowledge (Gemma 3 keeps one in six global), so this is a lower
  bound there, and a refusal is never wrong (counting all at full context would refuse a
  long-context Gemma 3 that fits; the runner's load-time reservation still fails with its
  numbers when a global layer's cache does not fit);
* the graph (compute buffer): the service's estimate, or what the last runner of the file
  measured when larger (measuring needs the model built, i.e. loaded);
* a vision projector: its file's weights; its encoder's compute buffer is not estimated (0).
  A one-file model (Ollama's layout: the image encoder and projector, `v.*`/`mm.*`, in the
  model's own file) has the same part: those tensors are its projector (`FileLayers.encoder`),
  not input weights, so the search places them on a GPU like a projector file's (the engine
  puts every `v.*`/`mm.*` tensor on the layout's projector device: `engine.ml.placement`);
  counted only for a model whose plugin encodes images (`fit_report(encoder=...)`), since
  otherwise nothing loads them.

A model whose output layer reads the token embedding (tied: no `output.weight`) gets a copy of
that embedding on the device holding the output layer (178 MB for Gemma 3 270M, first measured
on an H200: bench/results/gpu-h200-2026-11-27.json); `placed_report` adds it there
(`MemoryReport.output_copy`), so the search's layer sizes hold it once a plan puts the output
layer on a GPU (`planning.plan_from_file` re-plans from the placed report).

`placed_report` moves that all-CPU report onto a layout: each layer's weights and cache go to
the device holding the layer, and every GPU given layers gets a graph buffer of the same
estimate (ggml's scheduler reserves a worst-case compute buffer on each device it splits the
graph over, as Ollama counts it); a projector placed on a GPU takes its weights and graph there.
A GPU given no layers is absent from the placed report (`planning` charges it the graph it
would take before the search sees it).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ....engine.gguf import GGUFFile
from ....engine.kvcache.types import KVCacheType
from ....engine.ml.placement import layer_of_tensor
from ...store.modelinfo import _per_layer
from .memory import DeviceId, DeviceMemory, Layout, MemoryReport

__all__ = [
    "FileLayers",
    "fit_report",
    "placed_report",
    "read_file_layers",
]

_OUTPUT_PREFIXES = ("output.", "output_norm.")


@dataclass(frozen=True)
class FileLayers:
    """A model file's bytes per layer, as the layout search counts layers."""

    blocks: tuple[int, ...]  # weight bytes of each repeating block
    output: int  # weight bytes of the output layer (output, output_norm)
    inputs: int  # every other tensor: token embedding, rope factors, ...
    kv_elements: tuple[int, ...]  # per block: K + V elements per cache cell
    window: int = 0  # the sliding window (cells counted per block at most), 0: none
    tied_output: int = 0  # no output.weight: the token embedding's bytes the output reads
    encoder: int = 0  # the file's own image encoder and projector (v.*, mm.*): one-file vision


def _block_index(name: str, blocks: int) -> int | None:
    if not name.startswith("blk."):
        return None
    index = name.split(".", 2)[1]
    if not index.isdigit() or int(index) >= blocks:
        raise ValueError(f"the tensor {name} names a block the model does not have ({blocks})")
    return int(index)


def _read(path: Path) -> FileLayers:
    with GGUFFile(path) as f:
        meta = f.metadata
        blocks = meta.uint("block_count")
        if blocks <= 0:
            raise ValueError(f"{path.name} has no {meta.architecture}.block_count")
        weights = [0] * blocks
        output = inputs = encoder = 0
        embedding = f.tensors.get("token_embd.weight")
        tied = embedding.nbytes if embedding is not None and "output.weight" not in f.tensors else 0
        for name, tensor in f.tensors.items():
            index = _block_index(name, blocks)
            if index is not None:
                weights[index] += tensor.nbytes
            elif name.startswith(_OUTPUT_PREFIXES):
                output += tensor.nbytes
            elif layer_of_tensor(name, blocks) == "projector":
                encoder += tensor.nbytes
            else:
                inputs += tensor.nbytes
        heads = _per_layer(meta, "attention.head_count", blocks, 1)
        kv_heads = _per_layer(meta, "attention.head_count_kv", blocks, heads[0])
        embd = meta.uint("embedding_length")
        head_dim = embd // heads[0] if heads[0] else embd
        k_len = meta.uint("attention.key_length", head_dim)
        v_len = meta.uint("attention.value_length", head_dim)
        kv = tuple(h * (k_len + v_len) for h in kv_heads)
        window = meta.uint("attention.sliding_window", 0)
    return FileLayers(tuple(weights), output, inputs, kv, window, tied, encoder)


_cache: OrderedDict[tuple[str, int, int], FileLayers] = OrderedDict()
_lock = threading.Lock()


def read_file_layers(path: str | Path) -> FileLayers:
    """`FileLayers` of a GGUF file, remembered while the file is unchanged (a ValueError, the
    GGUF reader's GGUFError included, for a file that cannot be read)."""
    path = Path(path)
    st = os.stat(path)
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    layers = _read(path)
    with _lock:
        _cache[key] = layers
        while len(_cache) > 16:
            _cache.popitem(last=False)
    return layers


def fit_report(
    layers: FileLayers,
    cells: int,
    kv_type: str = "f16",
    graph: int = 0,
    projector: int | None = None,
    projector_graph: int = 0,
    encoder: bool = False,
) -> MemoryReport:
    """The memory report of the all-CPU layout: `cells` KV cells (num_ctx x parallel) of
    `kv_type`, a `graph` buffer, and a vision projector of `projector` bytes (None: none).
    `encoder`: the model encodes images with the file's own encoder (one-file vision), whose
    bytes then join the projector's; else they count nowhere (nothing loads them)."""
    if kv_type not in tuple(KVCacheType):
        known = ", ".join(KVCacheType)
        raise ValueError(f"unknown K/V cache type {kv_type!r} (one of {known})")
    if cells <= 0:
        raise ValueError(f"the KV cache needs at least one cell, not {cells}")
    per = KVCacheType(kv_type).element_bytes
    block_cells = min(cells, layers.window) if layers.window > 0 else cells
    cache = tuple(int(n * block_cells * per) for n in layers.kv_elements) + (0,)
    cpu = DeviceMemory(weights=(*layers.blocks, layers.output), cache=cache, graph=graph)
    if encoder and layers.encoder:
        projector = (projector or 0) + layers.encoder
    return MemoryReport(
        cpu=cpu,
        input_weights=layers.inputs,
        vision=projector is not None,
        projector=projector or 0,
        projector_graph=projector_graph if projector is not None else 0,
        output_copy=layers.tied_output,
    )


def placed_report(report: MemoryReport, layout: Layout) -> MemoryReport:
    """The all-CPU `report` with each layer's bytes moved to the device `layout` gives it (see
    the module docstring). GPUs the layout does not use are absent."""
    layers = report.layers
    cpu_weights, cpu_cache = list(report.cpu.weights), list(report.cpu.cache)
    moved: dict[DeviceId, tuple[list[int], list[int]]] = {}
    for part in layout.gpus:
        weights, cache = moved.setdefault(part.device, ([0] * layers, [0] * layers))
        for i in part.layers:
            if not 0 <= i < layers:
                raise ValueError(f"the layout names layer {i}; the model has {layers}")
            weights[i], cache[i] = cpu_weights[i], cpu_cache[i]
            if i == layers - 1:  # the output layer: with it, a tied output's embedding copy
                weights[i] += report.output_copy
            cpu_weights[i] = cpu_cache[i] = 0
    graph = report.cpu.graph
    gpus = {device: DeviceMemory(tuple(w), tuple(c), graph) for device, (w, c) in moved.items()}
    return MemoryReport(  # the projector's bytes stay apart: the search counts them by device
        cpu=DeviceMemory(tuple(cpu_weights), tuple(cpu_cache), graph),
        gpus=gpus,
        input_weights=report.input_weights,
        vision=report.vision,
        projector=report.projector,
        projector_graph=report.projector_graph,
        output_copy=report.output_copy,
    )
