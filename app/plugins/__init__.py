"""The plugin kit: everything a model-architecture plugin may import from Hearth.

Plugins import only this package and `hearth.engine.ml` (the tensor API: `Context`,
`Tensor`, `RopeOptions`, `weight`, `bind`, `linear`, `rms_norm`, `attention`), plus numpy
and pillow; a test enforces it. Third-party authors depend on this surface: keep it small and
documented. The guide is docs/plugins.md.

* The contract (defined by the engine in `hearth.engine.architecture`): `Architecture`,
  `ArchitectureSpec`, `ConfigReader`, `Metadata`, `Weights`, and the `register_architectures`
  hook (`hookimpl`, `Register`).
* What `forward` works with: `Batch`, `Input`, `Multimodal`, the KV caches (`Cache`,
  `Causal`, `Wrapper`, `Encoder`) and their errors.
* Transformer building blocks (`hearth.plugins.transformer`): `TransformerConfig`
  with `ConfigDefaults`,
  `Attention`, `GatedMLP`, `Block`, `layers`/`Layer`, `Transformer`, `StandardTransformer`,
  `part`/`bind_parts`, `read_rope`.
* Conversion from Hugging Face checkpoints (`hearth.plugins.conversion`): `Converter`,
  registered through the `register_converters` hook (`RegisterConverter`).
* Tests: `hearth.plugins.testing` writes tiny GGUF files and runs the conformance suite.
"""

from ..engine.architecture import (
    Architecture,
    Architectures,
    ArchitectureSpec,
    ConfigReader,
    Metadata,
    MultimodalNotSupportedError,
    Weights,
)
from ..engine.input import Batch, Input, Multimodal
from ..engine.kvcache import (
    MAX_POS,
    Cache,
    CacheFullError,
    Causal,
    Encoder,
    ShiftFn,
    ShiftNotSupportedError,
    Wrapper,
)
from .conversion import Converter, ConverterRegistry, RegisterConverter, UnsupportedCheckpointError
from .hookspecs import Register, hookimpl
from .registry import (
    ArchitectureRegistry,
    default_converters,
    default_registry,
    load_installed_model,
)
from .transformer import (
    Attention,
    Block,
    ConfigDefaults,
    GatedMLP,
    Layer,
    StandardTransformer,
    Transformer,
    TransformerConfig,
    bind_parts,
    layers,
    part,
    read_rope,
    with_multimodal,
)

__all__ = [
    "MAX_POS",
    "Architecture",
    "ArchitectureRegistry",
    "ArchitectureSpec",
    "Architectures",
    "Attention",
    "Batch",
    "Block",
    "Cache",
    "CacheFullError",
    "Causal",
    "ConfigDefaults",
    "ConfigReader",
    "Converter",
    "ConverterRegistry",
    "Encoder",
    "GatedMLP",
    "Input",
    "Layer",
    "Metadata",
    "Multimodal",
    "MultimodalNotSupportedError",
    "Register",
    "RegisterConverter",
    "ShiftFn",
    "ShiftNotSupportedError",
    "StandardTransformer",
    "Transformer",
    "TransformerConfig",
    "UnsupportedCheckpointError",
    "Weights",
    "Wrapper",
    "bind_parts",
    "default_converters",
    "default_registry",
    "hookimpl",
    "layers",
    "load_installed_model",
    "part",
    "read_rope",
    "with_multimodal",
]
