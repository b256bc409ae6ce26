"""Hearth plugin: the Qwen2 architecture (Qwen2, Qwen2.5 text models)."""

from hearth.plugins import ArchitectureSpec, Register, hookimpl

from .model import Config, Model

__all__ = ["Config", "Model", "register_architectures"]


@hookimpl
def register_architectures(register: Register) -> None:
    """Called by Hearth when it builds its registry of architectures."""
    register(ArchitectureSpec(name="qwen2", config=Config, model=Model, description="Qwen2"))
