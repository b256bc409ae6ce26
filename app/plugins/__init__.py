"""The public plugin API: everything a model-architecture plugin may import from Hearth.

Plugins import only this package and `hearth.engine.ml` (plus numpy and pillow); a test
enforces it. Keep this surface small: third-party authors depend on it.
"""

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
from .hookspecs import hookimpl
from .registry import ArchitectureSpec

__all__ = [
    "MAX_POS",
    "ArchitectureSpec",
    "Batch",
    "Cache",
    "CacheFullError",
    "Causal",
    "Encoder",
    "Input",
    "Multimodal",
    "ShiftFn",
    "ShiftNotSupportedError",
    "Wrapper",
    "hookimpl",
]
