"""Converters: how a plugin turns a Hugging Face checkpoint folder into its GGUF file.

A plugin that knows a Hugging Face architecture (config.json's `architectures`) subclasses
`Converter` and registers the class through the `register_converters` hook:

    class LlamaConverter(Converter):
        hf_architectures = ("LlamaForCausalLM",)
        gguf_architecture = "llama"

        def metadata(self) -> dict[str, Any]:
            return {"llama.block_count": self.config["num_hidden_layers"], ...}

        def tensor_name(self, hf_name: str) -> str | None:
            ...  # "model.layers.0.self_attn.q_proj.weight" -> "blk.0.attn_q.weight"

    @hookimpl
    def register_converters(register: RegisterConverter) -> None:
        register(LlamaConverter)

The driver (`hearth.convert`) owns everything else: reading and checking the folder, the
tokenizer (`tokenizer.json` or `tokenizer.model` into `tokenizer.ggml.*`), streaming the
tensors shard by shard, output types and quantization, and checking the written file with the
plugin's own `ArchitectureSpec` before it enters the model store. A converter is built once
per conversion with the folder's parsed config.json (`self.config`); its methods are called on
the converting thread. Arrays are numpy in numpy order (a `[out, in]` matrix is
`shape == (out, in)`), F32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, TypeAlias

import numpy as np

__all__ = [
    "Converter",
    "ConverterRegistry",
    "DuplicateConverterError",
    "RegisterConverter",
    "UnsupportedCheckpointError",
    "llama3_rope_factors",
    "llama_text_metadata",
    "permute_rope_rows",
    "rope_parameters",
]


class UnsupportedCheckpointError(ValueError):
    """A checkpoint folder no installed converter handles, or one a converter refuses."""


class DuplicateConverterError(ValueError):
    pass


class Converter:
    """One Hugging Face architecture's conversion rules (subclass it; see the module
    docstring). Only `hf_architectures`, `gguf_architecture`, `metadata` and `tensor_name` are
    required; everything else has a default.

    * `hf_architectures`: config.json `architectures` values this class converts.
    * `gguf_architecture`: the GGUF `general.architecture` written (the plugin's
      `ArchitectureSpec.name`, which loads the file).
    * `metadata()`: the `<arch>.*` keys (block count, sizes, heads, RoPE, epsilons ...) read
      from `self.config`. The driver writes `general.*` and `tokenizer.*` keys itself.
    * `tensor_names(hf_name)`: the GGUF names one checkpoint tensor is written under: none
      (skipped), one (`tensor_name`'s answer, the usual case) or several (copies, each given
      to `transform` with its own name).
    * `transform(gguf_name, array)`: the array as written (permuted rows for RoPE layouts,
      norm offsets, gates...). The default returns it unchanged.
    * `expected_shapes()`: GGUF name -> numpy shape of every tensor the model needs, as the
      config implies them (after `transform`); the driver refuses a folder that lacks one or
      has another shape. The default ({}) checks nothing here (loading the written file with
      the plugin still does).
    * `extra_tensors()`: tensors computed from the config rather than read (Llama 3.1's
      `rope_freqs`), as (GGUF name, F32 array).
    * `output_shape(gguf_name, shape)`: the numpy shape `transform` returns for an input of
      `shape` (default: the same), needed before the data is read (the header comes first).
    * `tokenizer_keys(model)`: extra `tokenizer.ggml.*` keys for a tokenizer of GGUF model
      `model` ("llama" or "gpt2"), e.g. Gemma's `add_space_prefix` False.
    * `keep_f32(gguf_name, shape)`: whether a tensor stays F32 whatever the output type
      (default: 1-D tensors, i.e. norms and biases, as llama.cpp does).
    * `vocab_size()`: how many token rows the tokenizer must have (padded with `[PADn]`
      tokens, as llama.cpp's converter does); None keeps the tokenizer's own count. The
      driver then sets `self.n_tokens` to the converted vocabulary's size before any tensor.
    """

    hf_architectures: ClassVar[tuple[str, ...]] = ()
    gguf_architecture: ClassVar[str] = ""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config: dict[str, Any] = dict(config)
        self.n_tokens: int | None = None

    def metadata(self) -> dict[str, Any]:
        """The `<gguf_architecture>.*` keys, from `self.config`."""
        raise NotImplementedError

    def tensor_name(self, hf_name: str) -> str | None:
        """The GGUF name of checkpoint tensor `hf_name`, or None to skip it."""
        raise NotImplementedError

    def tensor_names(self, hf_name: str) -> tuple[str, ...]:
        """Every GGUF name `hf_name` is written under (default: `tensor_name`'s, if any)."""
        name = self.tensor_name(hf_name)
        return () if name is None else (name,)

    def transform(self, gguf_name: str, array: np.ndarray) -> np.ndarray:
        """The array to write under `gguf_name` (F32, numpy order)."""
        return array

    def output_shape(self, gguf_name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape `transform(gguf_name, array)` returns for an array of `shape`."""
        return shape

    def tokenizer_keys(self, model: str) -> dict[str, Any]:
        """Extra `tokenizer.ggml.*` keys for a tokenizer of GGUF model `model`."""
        return {}

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """GGUF name -> numpy shape of every tensor the model needs ({}: no check here)."""
        return {}

    def extra_tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        """Tensors computed from the config, as (GGUF name, F32 array)."""
        return iter(())

    def keep_f32(self, gguf_name: str, shape: tuple[int, ...]) -> bool:
        """Whether `gguf_name` is written as F32 whatever the output type."""
        return len(shape) <= 1

    def vocab_size(self) -> int | None:
        """The number of token rows the file's vocabulary must have (None: the tokenizer's)."""
        size = self.config.get("vocab_size")
        return int(size) if size else None

    def hparam(self, *keys: str, default: Any = None) -> Any:
        """The first of `keys` present in config.json (or its `text_config`), else `default`."""
        for source in (self.config, self.config.get("text_config") or {}):
            for key in keys:
                if source.get(key) is not None:
                    return source[key]
        return default


RegisterConverter: TypeAlias = Callable[[type[Converter]], None]
"""The `register` callback given to `register_converters`."""


class ConverterRegistry:
    """Hugging Face architecture name -> Converter class, plus which plugin registered it."""

    def __init__(self) -> None:
        self._classes: dict[str, type[Converter]] = {}
        self._owners: dict[str, str] = {}

    def register(self, cls: type[Converter], plugin: str = "?") -> None:
        if not (isinstance(cls, type) and issubclass(cls, Converter)):
            raise TypeError(
                f"plugin {plugin} registered {cls!r}, not a subclass of hearth.plugins.Converter"
            )
        if not cls.hf_architectures or not cls.gguf_architecture:
            raise TypeError(
                f"plugin {plugin} registered converter {cls.__name__} without "
                "hf_architectures or gguf_architecture"
            )
        for name in cls.hf_architectures:
            if name in self._classes:
                raise DuplicateConverterError(
                    f"Hugging Face architecture '{name}' has two converters: from plugin "
                    f"'{self._owners[name]}' and from plugin '{plugin}'"
                )
        for name in cls.hf_architectures:
            self._classes[name] = cls
            self._owners[name] = plugin

    def names(self) -> list[str]:
        return sorted(self._classes)

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def get(self, architectures: list[str]) -> type[Converter]:
        """The converter for the first of config.json's `architectures` that has one; raises
        UnsupportedCheckpointError naming them and the installed ones otherwise."""
        for name in architectures:
            if name in self._classes:
                return self._classes[name]
        asked = ", ".join(f"'{a}'" for a in architectures) or "none (config.json has no list)"
        known = ", ".join(self.names()) or "none"
        raise UnsupportedCheckpointError(
            f"no installed plugin converts this checkpoint's architecture {asked} "
            f"(convertible architectures: {known})"
        )


# -- helpers shared by converters ------------------------------------------------------------


def permute_rope_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Hugging Face's q/k projection rows (each head's rotary halves: `[x0..x_{d/2-1},
    y0..]`) reordered into the interleaved pairs ggml's normal RoPE rotates (`[x0, y0, x1,
    y1, ...]`), as llama.cpp's and Ollama's converters do. Works on matrices `[out, in]` and
    on vectors `[out]`."""
    rows = weight.shape[0]
    half = rows // heads // 2
    return weight.reshape(heads, 2, half, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def rope_parameters(config: Mapping[str, Any]) -> dict[str, Any]:
    """RoPE settings of a (text) config: transformers 5's `rope_parameters`, older
    `rope_scaling`, with `rope_theta` from the top level when not inside."""
    params = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    params = dict(params.get("full_attention", params))
    if "rope_theta" not in params and config.get("rope_theta") is not None:
        params["rope_theta"] = config["rope_theta"]
    if "rope_type" not in params and params.get("type") is not None:
        params["rope_type"] = params["type"]
    return params


def llama3_rope_factors(params: Mapping[str, Any], head_dim: int) -> np.ndarray | None:
    """Llama 3.1's per-frequency RoPE divisors (GGUF `rope_freqs.weight`), or None when the
    config's RoPE is not of type "llama3"; llama.cpp's converter's formula."""
    if str(params.get("rope_type", "")).lower() != "llama3":
        return None
    base = float(params.get("rope_theta", 10000.0))
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    factor = float(params.get("factor", 8.0))
    low, high = (
        float(params.get("low_freq_factor", 1.0)),
        float(params.get("high_freq_factor", 4.0)),
    )
    old = float(params.get("original_max_position_embeddings", 8192))
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / float(freq)
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def llama_text_metadata(arch: str, c: Converter) -> dict[str, Any]:
    """The `<arch>.*` keys llama.cpp writes for a Llama-style text config (sizes, heads,
    epsilon, RoPE base and scaling, vocabulary size)."""
    heads = int(c.hparam("num_attention_heads", "n_head"))
    embd = int(c.hparam("hidden_size", "n_embd"))
    head_dim = c.hparam("head_dim")
    rope = rope_parameters(c.config.get("text_config") or c.config)
    kv: dict[str, Any] = {
        f"{arch}.block_count": int(c.hparam("num_hidden_layers", "n_layer")),
        f"{arch}.embedding_length": embd,
        f"{arch}.feed_forward_length": int(c.hparam("intermediate_size", "n_inner")),
        f"{arch}.attention.head_count": heads,
        f"{arch}.attention.head_count_kv": int(c.hparam("num_key_value_heads", default=heads)),
        f"{arch}.attention.layer_norm_rms_epsilon": float(c.hparam("rms_norm_eps", default=1e-5)),
        f"{arch}.rope.dimension_count": int(head_dim or embd // heads),
    }
    if (ctx := c.hparam("max_position_embeddings")) is not None:
        kv[f"{arch}.context_length"] = int(ctx)
    if rope.get("rope_theta") is not None:
        kv[f"{arch}.rope.freq_base"] = float(rope["rope_theta"])
    if head_dim:
        kv[f"{arch}.attention.key_length"] = int(head_dim)
        kv[f"{arch}.attention.value_length"] = int(head_dim)
    if rope.get("rope_type") == "linear" and rope.get("factor") is not None:
        kv[f"{arch}.rope.scaling.type"] = "linear"
        kv[f"{arch}.rope.scaling.factor"] = float(rope["factor"])
    if (vocab := c.hparam("vocab_size")) is not None:
        kv[f"{arch}.vocab_size"] = int(vocab)
    return kv
