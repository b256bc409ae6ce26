"""Check a written GGUF with the plugin that will run it: its config reader, its model's
weight binding and validation, and the tokenizer; no weight is loaded."""

from __future__ import annotations

from pathlib import Path

from ..engine.architecture import Architectures
from ..engine.gguf import GGUFFile
from ..engine.ml.ggml import GGMLBackend
from ..engine.ml.weights import WeightStore
from ..engine.tokenizer import load_tokenizer

__all__ = ["verify_file"]


def verify_file(path: Path, registry: Architectures) -> None:
    """Raise ValueError with a sentence when Hearth could not load the file at `path`."""
    file = GGUFFile(path)
    backend: GGMLBackend | None = None
    weights: WeightStore | None = None
    try:
        try:
            spec = registry.get(file.architecture)
        except LookupError as e:
            raise ValueError(str(e)) from None
        try:
            config = spec.config.from_gguf(file.metadata)
            backend = GGMLBackend(num_threads=1)
            weights = WeightStore(backend, file)
            model = spec.model(config, weights)
            model.validate()
            load_tokenizer(file.metadata)
        except (ValueError, KeyError, TypeError, LookupError) as e:
            raise ValueError(
                f"the converted file does not load with the {spec.name} plugin: {e}"
            ) from e
    finally:
        if weights is not None:
            weights.close()
        if backend is not None:
            backend.close()
        file.close()
