"""Where Hearth keeps its files (platformdirs), overridable for tests and portable installs.

HEARTH_HOME puts everything (models, chats, settings, logs) under one folder; HEARTH_MODELS
moves only the model store.
"""

from __future__ import annotations

from pathlib import Path

import platformdirs

from . import env

__all__ = ["data_dir", "models_dir", "logs_dir", "prompt_cache_dir"]

APP = "hearth"


def data_dir() -> Path:
    home = env.text("HEARTH_HOME")
    path = Path(home) if home else Path(platformdirs.user_data_dir(APP, appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir() -> Path:
    override = env.text("HEARTH_MODELS")
    path = Path(override) if override else data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def logs_dir() -> Path:
    home = env.text("HEARTH_HOME")
    path = Path(home) / "logs" if home else Path(platformdirs.user_log_dir(APP, appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def prompt_cache_dir() -> Path:
    """Saved prompt caches (the runners' KV state, kept across restarts)."""
    path = data_dir() / "prompt-cache"
    path.mkdir(parents=True, exist_ok=True)
    return path
