"""The tensor API (see api.py for the conventions) and its ggml implementation."""

from .api import Backend, CacheConfig, Context, OutOfMemoryError, RopeOptions
from .nn import attention, bind, full_attention, gelu_tanh, layer_norm, linear, rms_norm, weight
from .tensor import DType, Tensor

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
