"""Architectures by name, as plugins registered them (the contract is `hearth.plugins`'s
`Architecture` and `ArchitectureSpec`, defined in `hearth.engine.architecture`)."""

from __future__ import annotations

import logging
import os
from typing import Any

import pluggy

from ..engine.architecture import Architecture, ArchitectureSpec
from ..engine.model import LoadedModel, load_model
from .conversion import Converter, ConverterRegistry
from .manager import BUILTIN_PLUGINS, create_plugin_manager

__all__ = [
    "ArchitectureRegistry",
    "DuplicateArchitectureError",
    "UnknownArchitectureError",
    "build_converters",
    "build_registry",
    "default_converters",
    "default_registry",
    "load_installed_model",
]


log = logging.getLogger("hearth.plugins")


class DuplicateArchitectureError(ValueError):
    pass


class UnknownArchitectureError(LookupError):
    pass


class ArchitectureRegistry:
    """Name -> ArchitectureSpec, plus which plugin registered each name. The engine looks
    architectures up through it (it satisfies `hearth.engine.architecture.Architectures`).

    One name, two plugins: a third-party plugin overrides a built-in one (logged, at
    warning level, naming both); two third-party plugins, or two built-in ones, are an error
    naming both (`DuplicateArchitectureError`)."""

    def __init__(self, builtins: tuple[str, ...] = BUILTIN_PLUGINS) -> None:
        self._specs: dict[str, ArchitectureSpec[Any]] = {}
        self._owners: dict[str, str] = {}
        self._builtins = frozenset(builtins)
        self.plugins: list[str] = []
        self.overridden: dict[str, str] = {}  # architecture -> the built-in plugin overridden

    def register(self, spec: ArchitectureSpec[Any], plugin: str = "?") -> None:
        if not isinstance(spec, ArchitectureSpec):
            raise TypeError(f"plugin {plugin} registered {spec!r}, not an ArchitectureSpec")
        if not (isinstance(spec.model, type) and issubclass(spec.model, Architecture)):
            raise TypeError(
                f"plugin {plugin} registered architecture '{spec.name}' with model "
                f"{spec.model!r}, which is not a subclass of hearth.plugins.Architecture"
            )
        if spec.name in self._specs:
            other = self._owners[spec.name]
            builtin, other_builtin = plugin in self._builtins, other in self._builtins
            if builtin == other_builtin:
                raise DuplicateArchitectureError(
                    f"architecture '{spec.name}' is registered twice: by plugin "
                    f"'{other}' and by plugin '{plugin}'"
                )
            third, built = (other, plugin) if builtin else (plugin, other)
            self.overridden[spec.name] = built
            log.warning(
                "plugin '%s' overrides the built-in plugin '%s' for architecture '%s'",
                third,
                built,
                spec.name,
            )
            if builtin:  # the third-party plugin registered first: it keeps the name
                return
        self._specs[spec.name] = spec
        self._owners[spec.name] = plugin

    def get(self, name: str) -> ArchitectureSpec[Any]:
        spec = self._specs.get(name)
        if spec is None:
            known = ", ".join(sorted(self._specs)) or "none"
            plugins = ", ".join(self.plugins) or "none"
            what = f"'{name}'" if name else "an unnamed architecture (no general.architecture)"
            raise UnknownArchitectureError(
                f"this model uses {what}, which no installed plugin supports "
                f"(architectures: {known}; plugins: {plugins})"
            )
        return spec

    def owner(self, name: str) -> str:
        return self._owners[name]

    def names(self) -> list[str]:
        return sorted(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs


def build_registry(pm: pluggy.PluginManager) -> ArchitectureRegistry:
    """Ask every registered plugin for its architectures."""
    registry = ArchitectureRegistry()
    registry.plugins = sorted(n for n, _ in pm.list_name_plugin())
    for impl in pm.hook.register_architectures.get_hookimpls():

        def register(spec: ArchitectureSpec[Any], _plugin: str = impl.plugin_name) -> None:
            registry.register(spec, _plugin)

        impl.function(register=register)
    return registry


def default_registry() -> ArchitectureRegistry:
    """The built-in plugins' architectures plus those of installed third-party plugins (the
    `hearth.plugins` entry points, unless `HEARTH_DISABLE_PLUGINS=1`). What the programs that
    assemble Hearth (the CLI, the service, the runner) hand to the engine."""
    return build_registry(create_plugin_manager())


def build_converters(pm: pluggy.PluginManager) -> ConverterRegistry:
    """Ask every registered plugin for its checkpoint converters."""
    converters = ConverterRegistry()
    for impl in pm.hook.register_converters.get_hookimpls():

        def register(cls: type[Converter], _plugin: str = impl.plugin_name) -> None:
            converters.register(cls, _plugin)

        impl.function(register=register)
    return converters


def default_converters() -> ConverterRegistry:
    """The installed plugins' Hugging Face checkpoint converters (as `default_registry`)."""
    return build_converters(create_plugin_manager())


def load_installed_model(path: str | os.PathLike[str], **options: Any) -> LoadedModel:
    """`hearth.engine.model.load_model` with the installed plugins' architectures: for tests,
    benchmarks and scripts that load a model in-process."""
    return load_model(path, registry=default_registry(), **options)
