"""Which forward engine runs a model, and why.

`auto` (the default): Hearth's engine when an installed plugin registers the file's
architecture, llama.cpp's (through llama-cpp-python) otherwise. A model's own parameter
`engine` (`/api/create` parameters, a Modelfile's `PARAMETER engine llamacpp`) overrides the
global `HEARTH_ENGINE`, which overrides `auto`. When `auto` chose Hearth's engine and the
plugin refuses the file (a tensor missing, settings it cannot read), the scheduler starts the
runner on the llama.cpp engine instead, logs why, and `EngineChoice.refused` says so from
then on (in `/api/show`, the Models page, `/api/ps`): a fallback, never a failed request.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
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
    automatic: bool = field(default=False, compare=False)  # `auto` chose it (see `refused`)

    @property
    def falls_back(self) -> bool:
        """Whether the llama.cpp engine takes over when Hearth's plugin refuses the file: an
        automatic choice of Hearth's engine, with llama-cpp-python installed."""
        return self.automatic and self.engine == EngineKind.HEARTH and llamacpp_installed()

    def refused(self, architecture: str, why: str) -> EngineChoice:
        """The choice once Hearth's plugin refused the file: the llama.cpp engine, saying
        why (when it `falls_back`; any other choice is kept)."""
        if not self.falls_back:
            return self
        return EngineChoice(
            EngineKind.LLAMACPP,
            f"Hearth's plugin for architecture '{architecture}' could not load the file "
            f"({why}); the llama.cpp engine runs it",
        )


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
                EngineKind.HEARTH, f"a Hearth plugin runs architecture '{architecture}'", True
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
