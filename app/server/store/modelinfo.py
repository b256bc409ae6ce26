"""What the service knows about a model file without loading it: details, `model_info`,
capabilities, the chat template and a memory estimate, all read from GGUF metadata.

Reading a GGUF header takes a fraction of a second (a 262k-token vocabulary), so results are
cached per file (path, size and mtime), with the file closed again at once.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...engine.architecture import Architecture, Architectures
from ...engine.gguf import GGUFFile, Metadata
from ...engine.kvcache.types import KVCacheType
from ..prompting.toolformats import marker_tokens
from .engines import llamacpp_installed

__all__ = ["ModelInfo", "ModelInfoCache", "capabilities", "human_number", "quantization_name"]

_SHORT_ARRAY = 32  # longer metadata arrays are left out of `model_info` unless verbose


def human_number(n: int) -> str:
    """Ollama's parameter_size style: 268098176 -> '268.10M', 7241732096 -> '7.2B'."""
    if n >= 1_000_000_000:
        v = n / 1e9
        return f"{v:.0f}B" if v == int(v) else f"{v:.1f}B"
    if n >= 1_000_000:
        v = n / 1e6
        return f"{v:.0f}M" if v == int(v) else f"{v:.2f}M"
    if n >= 1000:
        return f"{n / 1e3:.0f}K"
    return str(n)


def quantization_name(meta: Metadata, tensors: dict[str, Any]) -> str:
    file_type = meta.raw("general.file_type")
    if file_type is not None:
        from gguf.constants import LlamaFileType

        try:
            return LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    counts: dict[str, int] = {}
    for t in tensors.values():
        counts[t.type_name] = counts.get(t.type_name, 0) + t.nbytes
    return max(counts, key=lambda k: counts[k]) if counts else "unknown"


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


@dataclass(frozen=True)
class ModelInfo:
    """Facts about one GGUF file. `has_plugin`: an installed Hearth plugin runs its
    architecture; without one the llama.cpp engine runs it (`engines.choose_engine`), and
    `supported` is False (with `problem` saying why) only when llama.cpp is not installed
    either."""

    architecture: str
    parameter_count: int
    quantization: str
    context_length: int
    file_size: int
    weights_bytes: int
    chat_template: str | None  # the file's, else the plugin's default, else None
    bos_text: str
    eos_text: str
    capabilities: tuple[str, ...]  # from the file alone; see `capabilities()`
    supported: bool
    problem: str | None
    kv_bytes_per_token: int  # f16 K+V for one token across all layers
    vocab_size: int
    embedding_length: int
    feed_forward_length: int
    head_count: int
    model_info: dict[str, Any] = field(default_factory=dict)  # short metadata, JSON-ready
    sees_images: bool = False  # the architecture's plugin has an image encoder
    has_plugin: bool = True
    # tool-call and thinking markers in the vocabulary (prompting.toolformats.marker_tokens)
    marker_tokens: frozenset[str] = frozenset()

    def details(self) -> dict[str, Any]:
        return {
            "parent_model": "",
            "format": "gguf",
            "family": self.architecture,
            "families": [self.architecture],
            "parameter_size": human_number(self.parameter_count),
            "quantization_level": self.quantization,
        }

    def estimate_memory(
        self, num_ctx: int, parallel: int = 1, num_batch: int = 512, kv_type: str = "f16"
    ) -> dict[str, int]:
        """Bytes the runner will need: weights + KV cache (every layer at full context, an
        upper bound for sliding-window models) + a rough compute graph. The runner's own
        report (in /api/ps) is the measured number."""
        cells = num_ctx * parallel
        kv = int(self.kv_bytes_per_token / 2 * KVCacheType(kv_type).element_bytes * cells)
        batch = min(num_batch, num_ctx)
        graph = 4 * batch * (4 * self.embedding_length + 2 * self.feed_forward_length)
        graph += 4 * batch * self.head_count * min(cells, 8192)
        graph += 4 * self.vocab_size * parallel
        return {
            "weights": self.weights_bytes,
            "kv_cache": kv,
            "graph": graph,
            "total": self.weights_bytes + kv + graph,
        }


def _token_text(meta: Metadata, key: str) -> str:
    token_id = meta.raw(key)
    tokens = meta.raw("tokenizer.ggml.tokens")
    if token_id is None or tokens is None or not 0 <= int(token_id) < len(tokens):
        return ""
    return str(tokens[int(token_id)])


def _per_layer(meta: Metadata, name: str, layers: int, default: int) -> list[int]:
    values = meta.ints(name)
    if not values:
        return [default] * layers
    return values if len(values) == layers else [values[0]] * layers


def _file_capabilities(
    meta: Metadata, model_cls: type[Architecture[Any]] | None, tensors: Any
) -> list[str]:
    caps = ["embedding" if meta.has("pooling_type") else "completion"]
    has_vision = meta.has("vision.block_count") or any(n.startswith("v.") for n in tensors)
    if has_vision and model_cls is not None and model_cls.handles_multimodal():
        caps.append("vision")
    return caps


def capabilities(
    info: ModelInfo, template: str | None, projector: ModelInfo | None = None
) -> list[str]:
    """What a model can do: from its file (and vision projector file, if any), plus what its
    chat template supports."""
    if not info.supported:
        return []
    caps = list(info.capabilities)
    # With a projector, a plugin's image encoder or llama.cpp's mtmd (no plugin) sees images.
    sees = info.sees_images or not info.has_plugin
    if projector is not None and sees and "vision" not in caps:
        caps.append("vision")
    source = template or ""
    if "tools" in source:
        caps.append("tools")
    if "suffix" in source:
        caps.append("insert")
    thinks = ("enable_thinking", "<think>", "thinking", "<|channel|>")  # the last: harmony
    if any(marker in source for marker in thinks):
        caps.append("thinking")
    return caps


def read_model_info(path: Path, registry: Architectures) -> ModelInfo:
    """Read one file (raises GGUFError for a damaged one)."""
    with GGUFFile(path) as f:
        meta, tensors = f.metadata, f.tensors
        arch = meta.architecture
        model_cls: type[Architecture[Any]] | None = None
        problem = None
        try:
            model_cls = registry.get(arch).model
        except LookupError as e:
            if not llamacpp_installed():
                problem = f"{e}, and the llama.cpp engine (llama-cpp-python) is not installed"
        template = meta.string("tokenizer.chat_template") or None
        if template is None and model_cls is not None:
            template = model_cls.default_chat_template
        params = int(
            meta.raw("general.parameter_count") or sum(t.n_elements for t in tensors.values())
        )
        layers = meta.uint("block_count")
        embd = meta.uint("embedding_length")
        heads = _per_layer(meta, "attention.head_count", layers, 1)
        kv_heads = _per_layer(meta, "attention.head_count_kv", layers, heads[0] if heads else 1)
        head_dim = embd // max(1, heads[0]) if heads and heads[0] else embd
        k_len = meta.uint("attention.key_length", head_dim)
        v_len = meta.uint("attention.value_length", head_dim)
        info: dict[str, Any] = {}
        for key, value in meta.items():
            if isinstance(value, list | np.ndarray) and len(value) > _SHORT_ARRAY:
                info[key] = None  # as Ollama: long arrays (vocabularies) only when verbose
            else:
                info[key] = _jsonable(value)
        info.setdefault("general.parameter_count", params)
        vocab = meta.raw("tokenizer.ggml.tokens")
        return ModelInfo(
            architecture=arch,
            parameter_count=params,
            quantization=quantization_name(meta, tensors),
            context_length=meta.uint("context_length", 2048),
            file_size=f.size,
            weights_bytes=sum(t.nbytes for t in tensors.values()),
            chat_template=template,
            bos_text=_token_text(meta, "tokenizer.ggml.bos_token_id"),
            eos_text=_token_text(meta, "tokenizer.ggml.eos_token_id"),
            capabilities=tuple(_file_capabilities(meta, model_cls, tensors)),
            supported=problem is None,
            problem=problem,
            kv_bytes_per_token=sum(2 * h * (k_len + v_len) for h in kv_heads),
            vocab_size=len(vocab) if vocab is not None else 0,
            embedding_length=embd,
            feed_forward_length=max(_per_layer(meta, "feed_forward_length", layers, 0) or [0]),
            head_count=heads[0] if heads else 1,
            model_info=info,
            sees_images=model_cls is not None and model_cls.handles_multimodal(),
            has_plugin=model_cls is not None,
            marker_tokens=marker_tokens(set(map(str, vocab)) if vocab is not None else ()),
        )


def read_full_metadata(path: Path) -> dict[str, Any]:
    """Every metadata value, arrays included (`/api/show` with verbose)."""
    with GGUFFile(path) as f:
        return {k: _jsonable(v) for k, v in f.metadata.items()}


class ModelInfoCache:
    """ModelInfo per file, remembered while the file is unchanged. Thread-safe."""

    def __init__(self, registry: Architectures, size: int = 64) -> None:
        self.registry = registry
        self._size = size
        self._items: OrderedDict[tuple[str, int, int], ModelInfo] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: Path) -> ModelInfo:
        st = os.stat(path)
        key = (str(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        info = read_model_info(path, self.registry)
        with self._lock:
            self._items[key] = info
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return info
