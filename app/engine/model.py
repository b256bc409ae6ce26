"""Opening a GGUF file as a runnable model: architecture lookup, config, weights, tokenizer.

The architectures come from the caller (`registry`): the programs that assemble Hearth build
them from the plugins (`hearth.plugins.default_registry()`); the engine itself knows only the
contract (`architecture.py`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .architecture import Architecture, Architectures, ArchitectureSpec
from .gguf import GGUFFile
from .ml.ggml import GGMLBackend
from .ml.weights import ProgressFn, WeightStore
from .tokenizer import Tokenizer, load_tokenizer

__all__ = ["LoadedModel", "ModelLoadError", "load_model"]


class ModelLoadError(RuntimeError):
    """The file cannot be run; the message is one sentence for the user."""


@dataclass
class LoadedModel:
    """A model ready to build graphs: the plugin's model object plus what it was built from.

    Owns the file map, the weights and (unless one was passed in) the backend; close() frees
    them all.
    """

    path: str
    file: GGUFFile
    spec: ArchitectureSpec[Any]
    config: object
    model: Architecture[Any]
    weights: WeightStore
    tokenizer: Tokenizer
    backend: GGMLBackend
    owns_backend: bool = True

    @property
    def architecture(self) -> str:
        return self.spec.name

    def close(self) -> None:
        self.weights.close()
        if self.owns_backend:
            self.backend.close()
        self.file.close()


def load_model(
    path: str | os.PathLike[str],
    *,
    registry: Architectures,
    backend: GGMLBackend | None = None,
    progress: ProgressFn | None = None,
    num_threads: int | None = None,
    flash_attention: bool = False,
) -> LoadedModel:
    """Open `path`, build its architecture's model (found in `registry`, which the program
    that assembles Hearth builds from the installed plugins) and load the weights.

    Raises GGUFError for a damaged file and ModelLoadError when the file is valid but cannot
    be run (unknown architecture, missing tensors, unsupported settings).
    """
    file = GGUFFile(path)
    owns_backend = backend is None
    weights: WeightStore | None = None
    try:
        try:
            spec = registry.get(file.architecture)
        except LookupError as e:
            raise ModelLoadError(f"{file.path.name}: {e}") from None
        try:
            config = spec.config.from_gguf(file.metadata)
        except (ValueError, KeyError, TypeError) as e:
            raise ModelLoadError(f"{file.path.name}: cannot read {spec.name} settings: {e}") from e
        if backend is None:
            backend = GGMLBackend(num_threads=num_threads, flash_attention=flash_attention)
        weights = WeightStore(backend, file)
        model = spec.model(config, weights)
        try:
            model.validate()
        except ValueError as e:
            raise ModelLoadError(f"{file.path.name}: {e}") from e
        try:
            tokenizer = load_tokenizer(file.metadata)
        except ValueError as e:
            raise ModelLoadError(f"{file.path.name}: {e}") from e
        for text in model.eos_tokens:
            if tokenizer.token_id(text) is not None:
                tokenizer.add_eos_token(text)
        weights.load(progress)
        return LoadedModel(
            str(path), file, spec, config, model, weights, tokenizer, backend, owns_backend
        )
    except BaseException:
        _cleanup(file, weights, backend if owns_backend else None)
        raise


def _cleanup(file: GGUFFile, weights: WeightStore | None, backend: GGMLBackend | None) -> None:
    if weights is not None:
        weights.close()
    if backend is not None:
        backend.close()
    file.close()
