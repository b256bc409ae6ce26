"""Built-in plugin: Qwen3-MoE (GGUF architecture `qwen3moe`, e.g. Qwen3-30B-A3B)."""

from hearth.plugins import ArchitectureSpec, Register, hookimpl

from .model import Config, Model


@hookimpl
def register_architectures(register: Register) -> None:
    register(ArchitectureSpec(name="qwen3moe", config=Config, model=Model, description="Qwen3-MoE"))
