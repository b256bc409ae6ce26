"""Hook specifications: what a Hearth plugin may implement.

A plugin is a module (or object) with functions decorated by `hookimpl`. It is found either as
a built-in (registered by module name) or through the entry-point group `hearth.plugins`:

    # pyproject.toml of a third-party plugin
    [project.entry-points."hearth.plugins"]
    mamba = "hearth_mamba"

Hooks are called when the plugin manager is created and when the registry is built, never on
the inference hot path: the engine calls the registered architecture classes directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import pluggy

from ..engine.architecture import ArchitectureSpec
from .conversion import RegisterConverter

__all__ = [
    "PROJECT",
    "Register",
    "RegisterConverter",
    "hookimpl",
    "hookspec",
    "register_architectures",
    "register_converters",
]

Register: TypeAlias = Callable[[ArchitectureSpec[Any]], None]
"""The `register` callback given to `register_architectures`."""

PROJECT = "hearth"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_architectures(register: Register) -> None:
    """Register the model architectures this plugin provides (required to be useful).

    Call `register(ArchitectureSpec(name=..., config=..., model=...))` once per architecture;
    `model` must subclass `hearth.plugins.Architecture` (else TypeError, naming the plugin).
    `name` is matched against a GGUF file's `general.architecture`. Registering a name that
    another plugin already registered raises `DuplicateArchitectureError`, naming both
    plugins. Called once per registry build, on the thread that builds it.
    """


@hookspec
def register_converters(register: RegisterConverter) -> None:
    """Register the Hugging Face checkpoint converters this plugin provides (optional).

    Call `register(MyConverter)` with a `hearth.plugins.Converter` subclass; its
    `hf_architectures` (config.json `architectures` values) are what `hearth create` converts
    with it, into a file of its `gguf_architecture`. Two plugins claiming the same Hugging Face
    architecture raise `DuplicateConverterError`, naming both. Called once per registry build.
    """
