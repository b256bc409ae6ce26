"""Built-in plugin: the Gemma 3 architecture (text)."""

from hearth.plugins import ArchitectureSpec, hookimpl

from .model import Config, Model


@hookimpl
def register_architectures(register) -> None:  # noqa: ANN001
    register(ArchitectureSpec(name="gemma3", config=Config, model=Model, description="Gemma 3"))
