"""KV caches: the contract (base), the cell-based causal cache, and the per-layer wrapper."""

from .base import MAX_POS, Cache, CacheFullError, SequenceState, ShiftFn, ShiftNotSupportedError
from .causal import Causal
from .encoder import Encoder
from .types import KVCacheType
from .wrapper import Wrapper

__all__ = [
    "MAX_POS",
    "Cache",
    "CacheFullError",
    "Causal",
    "Encoder",
    "KVCacheType",
    "SequenceState",
    "ShiftFn",
    "ShiftNotSupportedError",
    "Wrapper",
]
