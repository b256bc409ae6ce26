"""The tensor API (see api.py for the conventions) and its ggml implementation."""

from .api import (
    Backend,
    CacheConfig,
    Context,
    DType,
    OutOfMemoryError,
    RopeOptions,
    Tensor,
)
from .nn import attention, bind, full_attention, gelu_tanh, layer_norm, linear, rms_norm, weight

__all__ = [
    "Backend",
    "CacheConfig",
    "Context",
    "DType",
    "OutOfMemoryError",
    "RopeOptions",
    "Tensor",
    "attention",
    "bind",
    "full_attention",
    "gelu_tanh",
    "layer_norm",
    "linear",
    "rms_norm",
    "weight",
]
