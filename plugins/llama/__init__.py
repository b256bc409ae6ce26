"""Built-in plugin: the llama architecture (Llama 2/3/3.x, Mistral-style files)."""

from hearth.plugins import ArchitectureSpec, hookimpl

from .model import Config, Model


@hookimpl
def register_architectures(register) -> None:  # noqa: ANN001
    register(ArchitectureSpec(name="llama", config=Config, model=Model, description="Llama 2/3"))
