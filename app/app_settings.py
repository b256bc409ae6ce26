"""App settings: a small JSON file in the data folder, read once at start, written on change."""

from __future__ import annotations

import json
import secrets
import threading
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from hearth.default_model import DEFAULT_MODEL
from hearth.paths import data_dir

__all__ = [
    "AppSettings",
    "load_settings",
    "load_tool_grants",
    "new_api_key",
    "save_settings",
    "save_tool_grants",
    "settings_path",
]

THEMES = ("system", "light", "dark")


@dataclass
class AppSettings:
    # Local API: off = a private loopback port with a random token (only this app can talk to
    # the service); on = 127.0.0.1:api_port with no key, like Ollama; expose = 0.0.0.0 + api_key.
    api_enabled: bool = False
    api_port: int = 11434
    api_expose: bool = False
    api_key: str = ""
    # Sent as Ollama `options` with every request, so any compatible service honours them;
    # num_ctx 0 ("Automatic") sends none: the service decides (a model's Modelfile `num_ctx`,
    # else its default) and says what it decided (/api/show and each reply's final record).
    num_ctx: int = 0
    num_gpu: int = -1  # -1: let the service decide how many layers go to the GPU
    num_thread: int = 0  # 0: the service's default (physical cores)
    theme: str = "system"
    models_dir: str = ""  # empty: the service's default folder
    default_model: str = DEFAULT_MODEL
    # The model last picked (a chat's model chooser, or a chat started from the models page):
    # new chats use it while it is installed, else `default_model`.
    last_model: str = ""
    think: bool = True
    window_geometry: str = ""
    # "Get models": no downloads or searches while on (the service's own switch is
    # HEARTH_OFFLINE); the first-run offer of a chat model is made once.
    work_offline: bool = False
    offered_models: bool = False
    # Tools (MCP servers; the servers themselves are in hearth.agent's mcp.json): the model
    # turns one reply may take, how long one call may run, and the user's "always allow"
    # grants (`hearth.agent.approvals.Grant.to_json()` objects: a tool or a whole server, tied
    # to the server's command/URL). The earlier `tools_always_allowed` (names only, not tied to
    # a server's command) is not read: those tools are asked about again.
    tool_max_steps: int = 10
    tool_call_timeout: int = 60
    tool_grants: list[dict[str, str]] = field(default_factory=list)

    def request_options(self) -> dict[str, int]:
        """The runtime options every chat request carries (below any per-chat override)."""
        opts: dict[str, int] = {}
        if self.num_ctx > 0:
            opts["num_ctx"] = int(self.num_ctx)
        if self.num_gpu >= 0:
            opts["num_gpu"] = int(self.num_gpu)
        if self.num_thread > 0:
            opts["num_thread"] = int(self.num_thread)
        return opts


def new_api_key() -> str:
    return "hearth-" + secrets.token_urlsafe(24)


def settings_path() -> Path:
    return data_dir() / "settings.json"


_WRITING = threading.RLock()  # one writer of the file at a time in this process


def load_settings(path: Path | None = None) -> AppSettings:
    """Read the settings; a missing or damaged file gives the defaults (never a crash)."""
    path = path or settings_path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raw = {}
    known = {f.name: f for f in fields(AppSettings)}
    values = {}
    defaults = AppSettings()
    for key, value in raw.items() if isinstance(raw, dict) else ():
        if key in known and isinstance(value, type(getattr(defaults, key))):
            values[key] = value
    settings = AppSettings(**values)
    if settings.theme not in THEMES:
        settings.theme = "system"
    if not 1 <= settings.api_port <= 65535:
        settings.api_port = 11434
    if not 1 <= settings.tool_max_steps <= 100:
        settings.tool_max_steps = 10
    if not 1 <= settings.tool_call_timeout <= 3600:
        settings.tool_call_timeout = 60
    settings.tool_grants = [g for g in settings.tool_grants if isinstance(g, dict)]
    return settings


def save_settings(settings: AppSettings, path: Path | None = None) -> None:
    path = path or settings_path()
    with _WRITING:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(settings), indent=2), encoding="utf-8")
        tmp.replace(path)  # atomic: a crash mid-write never leaves half a file


def load_tool_grants(path: Path | None = None) -> list[dict[str, str]]:
    """The "always allow" grants as the file keeps them now (`hearth.agent.approvals`)."""
    return load_settings(path).tool_grants


def save_tool_grants(grants: list[dict[str, str]], path: Path | None = None) -> None:
    """Write the grants into the file, every other key as the file has it: the app and
    `hearth run --tools` each change grants this way, so neither loses the other's."""
    with _WRITING:
        settings = load_settings(path)
        settings.tool_grants = [dict(g) for g in grants]
        save_settings(settings, path)
