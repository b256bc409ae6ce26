"""Opening a GGUF file as a runnable model: architecture lookup, config, weights, tokenizer.

A model may come as two files: the text model and a projector with the image encoder
(llama.cpp's `mmproj-*.gguf`, architecture `clip`; Ollama's registry projector for Llama 3.2
Vision, architecture `mllama`; ...). `load_model(path, projector=...)` reads weights from both,
and the architecture's config reader sees the projector's keys as `meta.projector`. The engine
takes any projector file: whether the model can use it is the plugin's call (its config
reader raises ValueError with a sentence for one it does not understand).

The architectures come from the caller (`registry`): the programs that assemble Hearth build
them from the plugins (`hearth.plugins.registry.default_registry()`); the engine itself knows
only the contract (`architecture.py`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .architecture import Architecture, Architectures, ArchitectureSpec
from .gguf import GGUFError, GGUFFile
from .ml.ggml import GGMLBackend
from .ml.placement import DevicePlacement
from .ml.weights import ProgressFn, WeightStore
from .tokenizer import Tokenizer, load_tokenizer

__all__ = ["LoadedModel", "ModelLoadError", "load_model"]


class ModelLoadError(RuntimeError):
    """The file cannot be run; the message is one sentence for the user."""


@dataclass
class LoadedModel:
    """A model ready to build graphs: the plugin's model object plus what it was built from.

    Owns the file maps, the weights and (unless one was passed in) the backend; close() frees
    them all. `projector`: the projector file the model was loaded with, if any.
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
    projector: GGUFFile | None = None

    @property
    def architecture(self) -> str:
        return self.spec.name

    def close(self) -> None:
        self.weights.close()
        if self.owns_backend:
            self.backend.close()
        self.file.close()
        if self.projector is not None:
            self.projector.close()


def load_model(
    path: str | os.PathLike[str],
    *,
    registry: Architectures,
    projector: str | os.PathLike[str] | None = None,
    backend: GGMLBackend | None = None,
    progress: ProgressFn | None = None,
    num_threads: int | None = None,
    flash_attention: bool = False,
    placement: DevicePlacement | None = None,
) -> LoadedModel:
    """Open `path`, build its architecture's model (found in `registry`, which the program
    that assembles Hearth builds from the installed plugins) and load the weights.
    `projector`: a separate projector file (`mmproj-*.gguf`) with the image encoder, of any
    architecture: the plugin reads it through `meta.projector` and refuses one it cannot use.

    Raises GGUFError for a damaged file and ModelLoadError when the file is valid but cannot
    be run (unknown architecture, missing tensors, unsupported settings).
    `placement`: which layers go on which devices (GPUs, RPC workers; default: the CPU), for
    a backend this call creates.
    """
    file = GGUFFile(path)
    owns_backend = backend is None
    weights: WeightStore | None = None
    proj: GGUFFile | None = None
    try:
        if projector is not None:
            proj = GGUFFile(projector)
        try:
            spec = registry.get(file.architecture)
        except LookupError as e:
            raise ModelLoadError(f"{file.path.name}: {e}") from None
        meta = file.metadata.with_projector(proj.metadata) if proj is not None else file.metadata
        try:
            config = spec.config.from_gguf(meta)
        except (ValueError, KeyError, TypeError) as e:
            raise ModelLoadError(f"{file.path.name}: cannot read {spec.name} settings: {e}") from e
        if backend is None:
            backend = GGMLBackend(
                num_threads=num_threads, flash_attention=flash_attention, placement=placement
            )
        try:
            weights = WeightStore(backend, file, proj)
        except GGUFError as e:
            if proj is None:
                raise
            raise ModelLoadError(str(e)) from None
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
            str(path), file, spec, config, model, weights, tokenizer, backend, owns_backend, proj
        )
    except BaseException:
        _cleanup(file, weights, backend if owns_backend else None, proj)
        raise


def _cleanup(
    file: GGUFFile,
    weights: WeightStore | None,
    backend: GGMLBackend | None,
    projector: GGUFFile | None = None,
) -> None:
    if weights is not None:
        weights.close()
    if backend is not None:
        backend.close()
    file.close()
    if projector is not None:
        projector.close()
