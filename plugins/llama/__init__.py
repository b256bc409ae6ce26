"""Built-in plugin: the llama architecture (Llama 2/3, Mistral-style files), and the
converter of Hugging Face LlamaForCausalLM checkpoints."""

from hearth.plugins import ArchitectureSpec, Register, RegisterConverter, hookimpl

from .convert import LlamaConverter
from .model import Config, Model


@hookimpl
def register_architectures(register: Register) -> None:
    register(ArchitectureSpec(name="llama", config=Config, model=Model, description="Llama 2/3"))


@hookimpl
def register_converters(register: RegisterConverter) -> None:
    register(LlamaConverter)
