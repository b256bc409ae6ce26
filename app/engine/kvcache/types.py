"""The K/V cache's storage types, one table for every engine and estimate: the name a user
writes (HEARTH_KV_CACHE_TYPE, the runner's --kv-type), ggml's type and the bytes one element
takes (a Q8_0 block holds 32 values in 34 bytes, a Q4_0 block in 18)."""

from __future__ import annotations

from enum import StrEnum

from ..ml.tensor import DType

__all__ = ["KVCacheType"]


class KVCacheType(StrEnum):
    F16 = "f16"
    Q8_0 = "q8_0"
    Q4_0 = "q4_0"

    @property
    def dtype(self) -> DType:
        """ggml's type (its value is ggml's type id, as llama.cpp's `type_k`/`type_v` take)."""
        return {"f16": DType.F16, "q8_0": DType.Q8_0, "q4_0": DType.Q4_0}[self.value]

    @property
    def element_bytes(self) -> float:
        return {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}[self.value]
