"""Built-in plugin: Llama 3.2 Vision (GGUF architecture `mllama`), text and images."""

from hearth.plugins import ArchitectureSpec, Register, hookimpl

from .convert import register_converters as register_converters
from .model import Config, Model


@hookimpl
def register_architectures(register: Register) -> None:
    register(
        ArchitectureSpec(name="mllama", config=Config, model=Model, description="Llama 3.2 Vision")
    )
