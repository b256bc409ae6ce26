"""Built-in plugin: the qwen2 architecture (Qwen2, Qwen2.5, the DeepSeek-R1 distills)."""

from hearth.plugins import ArchitectureSpec, Register, hookimpl

from .model import CHATML, Config, Model

__all__ = ["CHATML", "Config", "Model"]


@hookimpl
def register_architectures(register: Register) -> None:
    register(ArchitectureSpec(name="qwen2", config=Config, model=Model, description="Qwen2/2.5"))
