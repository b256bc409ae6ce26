"""Built-in plugin: the qwen3 architecture (Qwen3 dense models)."""

from hearth.plugins import ArchitectureSpec, Register, hookimpl

from .model import Config, Model

__all__ = ["Config", "Model"]


@hookimpl
def register_architectures(register: Register) -> None:
    register(ArchitectureSpec(name="qwen3", config=Config, model=Model, description="Qwen3"))
