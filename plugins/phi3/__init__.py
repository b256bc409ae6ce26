"""Built-in plugin: the phi3 architecture (Phi-3, Phi-3.5 and Phi-4 mini)."""

from hearth.plugins import ArchitectureSpec, Register, hookimpl

from .model import Config, Model

__all__ = ["Config", "Model"]


@hookimpl
def register_architectures(register: Register) -> None:
    register(ArchitectureSpec(name="phi3", config=Config, model=Model, description="Phi-3/4 mini"))
