"""The plugin manager factory (no module-level state: every caller gets its own manager)."""

from __future__ import annotations

import importlib
from collections.abc import Iterable

import pluggy

from .. import env
from . import hookspecs

__all__ = ["BUILTIN_PLUGINS", "ENTRY_POINT_GROUP", "create_plugin_manager"]

ENTRY_POINT_GROUP = "hearth.plugins"
# Registered by module name (not entry points) so that frozen builds find them.
BUILTIN_PLUGINS = (
    "hearth_llama",
    "hearth_gemma3",
    "hearth_mllama",
    "hearth_qwen2",
    "hearth_qwen3",
    "hearth_phi3",
    "hearth_qwen3moe",
    "hearth_gpt_oss",
)


def create_plugin_manager(
    builtins: Iterable[str] = BUILTIN_PLUGINS,
    autoload: bool | None = None,
) -> pluggy.PluginManager:
    """Built-in plugins, plus third-party ones from the `hearth.plugins` entry points unless
    `HEARTH_DISABLE_PLUGINS=1` (or `autoload=False`). A misspelled hook fails here."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in builtins:
        pm.register(importlib.import_module(name), name=name)
    if autoload is None:
        autoload = not env.flag("HEARTH_DISABLE_PLUGINS")
    if autoload:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    pm.check_pending()
    return pm
