"""Built-in plugin: gpt-oss (GGUF architecture `gpt-oss`, OpenAI's open-weight MoE models)."""

from hearth.plugins import ArchitectureSpec, Register, hookimpl

from .model import Config, Model


@hookimpl
def register_architectures(register: Register) -> None:
    register(ArchitectureSpec(name="gpt-oss", config=Config, model=Model, description="gpt-oss"))
