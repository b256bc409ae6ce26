"""Built-in plugin: the Gemma 3 architecture (text)."""

from hearth.plugins import ArchitectureSpec, Register, hookimpl

from .model import Config, Model


@hookimpl
def register_architectures(register: Register) -> None:
    register(ArchitectureSpec(name="gemma3", config=Config, model=Model, description="Gemma 3"))
