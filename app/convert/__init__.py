"""Writing GGUF models from Hugging Face checkpoints (`hearth create -f DIR`), and
quantizing them on the way (`quantize.py`)."""

from .quantize import SCHEMES, TensorInfo, parse_scheme, quantize, quantize_plan

__all__ = ["SCHEMES", "TensorInfo", "parse_scheme", "quantize", "quantize_plan"]
