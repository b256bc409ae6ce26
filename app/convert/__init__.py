"""Hugging Face checkpoint folders -> GGUF files (`hearth create NAME -f FOLDER`).

The driver (`convert_checkpoint`) reads and checks the folder, converts the tokenizer, and
streams the tensors into one GGUF file; the architecture-specific rules (metadata keys, tensor
names, permutations) come from the plugins' `Converter`s (`hearth.plugins.Converter`,
registered through the `register_converters` hook); quantizing on the way is `quantize.py`
(llama.cpp's per-tensor type policy and ggml's quantizers). Imports the engine and the plugin
kit only.
"""

from .checkpoint import Checkpoint, CheckpointError, is_checkpoint, open_checkpoint
from .driver import (
    OUTPUT_TYPES,
    ConversionResult,
    ConvertProgress,
    PreparedConversion,
    convert_checkpoint,
    plan_conversion,
    prepare_conversion,
)
from .quantize import SCHEMES, TensorInfo, parse_scheme, quantize, quantize_plan

__all__ = [
    "OUTPUT_TYPES",
    "SCHEMES",
    "Checkpoint",
    "CheckpointError",
    "ConversionResult",
    "ConvertProgress",
    "PreparedConversion",
    "TensorInfo",
    "convert_checkpoint",
    "is_checkpoint",
    "open_checkpoint",
    "parse_scheme",
    "plan_conversion",
    "prepare_conversion",
    "quantize",
    "quantize_plan",
]
