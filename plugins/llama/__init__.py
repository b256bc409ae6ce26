"""Built-in plugin: the llama architecture (Llama 2/3, Mistral-style files)."""

from hearth.plugins import ArchitectureSpec, Register, hookimpl

from .model import Config, Model


@hookimpl
def register_architectures(register: Register) -> None:
    register(ArchitectureSpec(name="llama", config=Config, model=Model, description="Llama 2/3"))
