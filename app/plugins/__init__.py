"""The plugin kit: everything a model-architecture plugin imports from Hearth, in one place.

Plugins import only this package (`from hearth.plugins import ...`, names in `__all__`), plus
numpy and pillow; their tests also use the conformance suite, `hearth.plugins.testing`. A
test enforces it. Third-party authors depend on this surface: keep it small and documented.
The guide is docs/plugins.md.

* The contract (defined by the engine in `hearth.engine.architecture`): `Architecture`,
  `ArchitectureSpec`, `ConfigReader`, `Metadata`, `Weights`, `MultimodalNotSupportedError`,
  and the `register_architectures` hook (`hookimpl`, `Register`).
* What `forward` works with: `Batch`, `Input`, `Multimodal`, the KV caches (`Cache`,
  `Causal`, `Wrapper`, `Encoder`) and their errors.
* The tensor API (`hearth.engine.ml`): `Context`, `Tensor`, `DType`, `RopeOptions`, weight
  declarations (`weight`, `bind`) and the shared ops (`linear`, `rms_norm`, `layer_norm`,
  `gelu_tanh`, `attention`, `full_attention`).
* Transformer building blocks (`hearth.plugins.transformer`): `TransformerConfig` with
  `ConfigDefaults`, `Attention` (`NormedAttention`: per-head q/k norms; `FusedAttention`:
  one q/k/v matrix; `Attend`: what they share), `GatedMLP` (`FusedMLP`: one gate/up
  matrix), `Block` (`PreNormBlock`: what the pre-norm layer reads), `layers`/`Layer`, `Transformer`
  (`block_for` for layers of several kinds), `StandardTransformer`, `part`/`bind_parts`,
  `with_multimodal`; settings read as llama.cpp reads them
  (`hearth.plugins.settings`): `read_rope` (linear and YaRN scaling), `sliding_layers`.
* Routed experts (`hearth.plugins.moe`): `Routing` (expert count, k, gating, renormalisation,
  read from the file) and `Experts` (a layer's router and stacked experts through
  `mul_mat_id`).
* Images: `images` (decoding and pixel normalisation: `images.decode_rgb`, ...), and for
  ViT-style encoders `EncoderConfig` (the common sizes and their checks), `EncoderAttention`
  (a layer's q/k/v/out weights and projections) and `check_shapes`.
* Conversion from Hugging Face checkpoints (`hearth.plugins.conversion`): `Converter`,
  registered through the `register_converters` hook (`RegisterConverter`), and its helpers
  (`llama_text_metadata`, `permute_rope_rows`, `rope_parameters`, `llama3_rope_factors`).

What assembles Hearth from the installed plugins (`default_registry`,
`load_installed_model`, ...) is the host's side, in `hearth.plugins.registry`.
"""

from ..engine.architecture import (
    Architecture,
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
from ..engine.ml import (
    Context,
    DType,
    RopeOptions,
    Tensor,
    attention,
    bind,
    full_attention,
    gelu_tanh,
    layer_norm,
    linear,
    rms_norm,
    weight,
)
from . import images
from .conversion import (
    Converter,
    RegisterConverter,
    UnsupportedCheckpointError,
    llama3_rope_factors,
    llama_text_metadata,
    permute_rope_rows,
    rope_parameters,
)
from .hookspecs import Register, hookimpl
from .moe import Experts, Routing
from .settings import read_rope, sliding_layers
from .transformer import (
    Attend,
    Attention,
    Block,
    ConfigDefaults,
    FusedAttention,
    FusedMLP,
    GatedMLP,
    Layer,
    NormedAttention,
    PreNormBlock,
    StandardTransformer,
    Transformer,
    TransformerConfig,
    bind_parts,
    layers,
    part,
    sliding_window_cache,
    with_multimodal,
)
from .vision import EncoderAttention, EncoderConfig, check_shapes

__all__ = [
    "MAX_POS",
    "Architecture",
    "ArchitectureSpec",
    "Attend",
    "Attention",
    "Batch",
    "Block",
    "Cache",
    "CacheFullError",
    "Causal",
    "ConfigDefaults",
    "ConfigReader",
    "Context",
    "Converter",
    "DType",
    "Encoder",
    "EncoderAttention",
    "EncoderConfig",
    "Experts",
    "FusedAttention",
    "FusedMLP",
    "GatedMLP",
    "Input",
    "Layer",
    "Metadata",
    "Multimodal",
    "MultimodalNotSupportedError",
    "NormedAttention",
    "PreNormBlock",
    "Register",
    "RegisterConverter",
    "RopeOptions",
    "Routing",
    "ShiftFn",
    "ShiftNotSupportedError",
    "StandardTransformer",
    "Tensor",
    "Transformer",
    "TransformerConfig",
    "UnsupportedCheckpointError",
    "Weights",
    "Wrapper",
    "attention",
    "bind",
    "bind_parts",
    "check_shapes",
    "full_attention",
    "gelu_tanh",
    "hookimpl",
    "images",
    "layer_norm",
    "layers",
    "linear",
    "llama3_rope_factors",
    "llama_text_metadata",
    "part",
    "permute_rope_rows",
    "read_rope",
    "rms_norm",
    "rope_parameters",
    "sliding_layers",
    "sliding_window_cache",
    "weight",
    "with_multimodal",
]
