"""Hearth plugin: the Granite architecture (IBM Granite 3.x dense text models)."""

from hearth.plugins import ArchitectureSpec, Register, hookimpl

from .model import Config, Model

__all__ = ["Config", "Model", "register_architectures"]


@hookimpl
def register_architectures(register: Register) -> None:
    """Called by Hearth when it builds its registry of architectures."""
    register(ArchitectureSpec(name="granite", config=Config, model=Model, description="Granite"))
