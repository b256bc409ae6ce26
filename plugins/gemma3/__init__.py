"""Built-in plugin: the Gemma 3 architecture (text and vision), and the converter of Hugging
Face Gemma 3 checkpoints."""

from hearth.plugins import ArchitectureSpec, Register, RegisterConverter, hookimpl

from .convert import Gemma3Converter
from .model import Config, Model


@hookimpl
def register_architectures(register: Register) -> None:
    register(ArchitectureSpec(name="gemma3", config=Config, model=Model, description="Gemma 3"))


@hookimpl
def register_converters(register: RegisterConverter) -> None:
    register(Gemma3Converter)
