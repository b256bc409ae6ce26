"""Which forward engine runs a model, and why.

`auto` (the default): Hearth's engine when an installed plugin registers the file's
architecture, llama.cpp's (through llama-cpp-python) otherwise. A model's own parameter
`engine` (`/api/create` parameters, a Modelfile's `PARAMETER engine llamacpp`) overrides the
global `HEARTH_ENGINE`, which overrides `auto`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cache

from ...runner.protocol import EngineKind

__all__ = ["ENGINE_CHOICES", "EngineChoice", "EngineUnavailableError", "choose_engine"]

ENGINE_CHOICES = ("auto", *EngineKind)


class EngineUnavailableError(ValueError):
    """The engine asked for cannot run this model; the message says why."""


@dataclass(frozen=True)
class EngineChoice:
    engine: EngineKind  # the runner's --engine
    reason: str  # a sentence for /api/show and the GUI


@cache
def llamacpp_installed() -> bool:
    """Whether llama-cpp-python is importable (looked up, not imported: the service never
    loads llama.cpp itself)."""
    return importlib.util.find_spec("llama_cpp") is not None


def choose_engine(
    architecture: str, has_plugin: bool, model_setting: str | None, global_setting: str = "auto"
) -> EngineChoice:
    """The engine for a file of `architecture` (`has_plugin`: an installed Hearth plugin
    registers it). Raises EngineUnavailableError for a choice that cannot run it."""
    if model_setting and model_setting != "auto":
        wanted, source = model_setting, f"the model's parameter engine={model_setting}"
    elif global_setting != "auto":
        wanted, source = global_setting, f"HEARTH_ENGINE={global_setting}"
    else:
        wanted, source = "auto", ""
    if wanted not in ENGINE_CHOICES:
        raise EngineUnavailableError(
            f"unknown engine {wanted!r}; use one of {', '.join(ENGINE_CHOICES)}"
        )
    if wanted == "auto":
        if has_plugin:
            return EngineChoice(
                EngineKind.HEARTH, f"a Hearth plugin runs architecture '{architecture}'"
            )
        wanted, source = EngineKind.LLAMACPP, f"no Hearth plugin for architecture '{architecture}'"
    if wanted == EngineKind.HEARTH and not has_plugin:
        raise EngineUnavailableError(
            f"{source} asks for Hearth's engine, but no installed Hearth plugin runs "
            f"architecture '{architecture}'; use engine auto or llamacpp"
        )
    if wanted == EngineKind.LLAMACPP and not llamacpp_installed():
        raise EngineUnavailableError(
            f"{source}, and the llama.cpp engine needs llama-cpp-python, which is not "
            "installed; reinstall Hearth (./hearth builds it)"
        )
    return EngineChoice(EngineKind(wanted), source)
