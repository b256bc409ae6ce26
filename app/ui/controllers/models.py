"""The installed models: list, details, import a .gguf, delete (all over the HTTP API), and
a watch that notices models created, pulled or deleted outside the window."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from ..api_client import ApiClient, ApiError
from ..item_models.model_list import ModelListModel, ModelRow

__all__ = ["ModelsController", "model_name_for", "running_on"]


def running_on(ps_entry: dict[str, Any]) -> str:
    """Where a loaded model runs, from its /api/ps entry: Hearth's `hearth.layout` ("CPU only",
    "18/19 layers on CUDA0"), else from `size_vram` as Ollama reports it."""
    extra = ps_entry.get("hearth")
    layout = extra.get("layout") if isinstance(extra, dict) else None
    if isinstance(layout, str) and layout:
        return layout
    size, vram = int(ps_entry.get("size") or 0), int(ps_entry.get("size_vram") or 0)
    if not vram:
        return "CPU only"
    return "GPU" if vram >= size else f"{round(100 * vram / size)}% GPU"


def tags_signature(body: Any) -> tuple[tuple[str, str, str, int], ...]:
    """What identifies an /api/tags answer's list: each model's name, digest, modification
    time and size. Two answers with the same signature list the same models."""
    tags = body.get("models", []) if isinstance(body, dict) else []
    return tuple(
        (
            str(t.get("name") or t.get("model") or ""),
            str(t.get("digest") or ""),
            str(t.get("modified_at") or ""),
            int(t.get("size") or 0),
        )
        for t in tags
        if isinstance(t, dict)
    )


def model_name_for(path: Path) -> str:
    """A model name from a file name: 'Llama-3.2-1B.Q4_K_M.gguf' → 'llama-3.2-1b.q4_k_m'."""
    stem = path.name[: -len(".gguf")] if path.name.lower().endswith(".gguf") else path.stem
    name = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-._")
    return name or "imported"


class ModelsController(QObject):
    models_changed = Signal()
    model_updated = Signal(str)  # name: its /api/show details arrived
    import_started = Signal(str)  # model name
    import_progress = Signal(str, int, int)  # status line, completed, total (0: unknown)
    import_finished = Signal(str, bool, str)  # name, ok, message
    deleted = Signal(str)
    running_changed = Signal()  # /api/ps answered: which models are loaded, and where
    notice = Signal(str, str)  # level, sentence

    # How often the watch asks the service for its models while the window is seen. The
    # service has no change notification; /api/tags reads its model store's manifests, a few
    # milliseconds, and the list is only rebuilt when the answer differs.
    WATCH_INTERVAL_MS = 4000

    def __init__(self, client: ApiClient, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._client = client
        self.model = ModelListModel(self)
        self.importing = False
        self.loaded = False
        self._signature: tuple[tuple[str, str, str, int], ...] | None = None
        self._watch_active: Callable[[], bool] = lambda: False
        self._polling = False
        self.watch_timer = QTimer(self)
        self.watch_timer.setInterval(self.WATCH_INTERVAL_MS)
        self.watch_timer.timeout.connect(self._poll)

    def info(self, name: str) -> ModelRow | None:
        return self.model.info(name)

    def names(self) -> list[str]:
        return [m.name for m in self.model.models()]

    def refresh(self) -> None:
        call = self._client.get("/api/tags")
        call.done.connect(self._on_tags)
        call.failed.connect(
            lambda e: self.notice.emit(
                "error", self.tr("Could not list the models: %1").replace("%1", e.message)
            )
        )

    def watch(self, active: Callable[[], bool]) -> None:
        """Keep the list in step with the service: every WATCH_INTERVAL_MS, while `active()`
        (the window is shown and not minimized), ask /api/tags and update the list only when
        it changed, so a model created, pulled or deleted by the CLI or another client of the
        service appears (or goes) without Refresh. Polls that fail are silent (the service may
        be restarting; its state is shown elsewhere)."""
        self._watch_active = active
        self.watch_timer.start()

    def stop_watching(self) -> None:
        self.watch_timer.stop()

    def _poll(self) -> None:
        if self._polling or not self._watch_active():
            return
        self._polling = True
        call = self._client.get("/api/tags", timeout_ms=5000)
        call.done.connect(self._on_poll)
        call.failed.connect(self._on_poll_failed)

    def _on_poll(self, body: Any) -> None:
        self._polling = False
        if tags_signature(body) != self._signature:
            self._on_tags(body)

    def _on_poll_failed(self, _err: ApiError) -> None:
        self._polling = False

    def _on_tags(self, body: Any) -> None:
        self._signature = tags_signature(body)
        tags = body.get("models", []) if isinstance(body, dict) else []
        old = {m.name: m for m in self.model.models()}
        infos = []
        for tag in tags:
            info = ModelRow.from_tag(tag)
            previous = old.get(info.name)
            if previous and previous.details_loaded and previous.modified_at == info.modified_at:
                info = previous  # unchanged: keep the details already fetched
            infos.append(info)
        self.model.set_models(infos)
        self.loaded = True
        self.models_changed.emit()
        for info in infos:
            if not info.details_loaded:
                self.fetch_details(info.name)
        self.refresh_running()

    def refresh_running(self) -> None:
        """Ask the service which models are loaded and where they run (/api/ps)."""
        self._client.get("/api/ps").done.connect(self._on_ps)

    def _on_ps(self, body: Any) -> None:
        entries = body.get("models", []) if isinstance(body, dict) else []
        where: dict[str, str] = {}
        for e in entries:
            if isinstance(e, dict):
                where[str(e.get("name") or e.get("model") or "")] = running_on(e)
        for info in self.model.models():
            runs_on = where.get(info.name, "")
            if runs_on != info.runs_on:
                info.runs_on = runs_on
                self.model.refresh_row(info.name)
        self.running_changed.emit()

    def fetch_details(self, name: str) -> None:
        call = self._client.post("/api/show", {"model": name})
        call.done.connect(lambda body, n=name: self._on_show(n, body))

    def _on_show(self, name: str, body: Any) -> None:
        info = self.model.info(name)
        if info is None or not isinstance(body, dict):
            return
        info.add_show(body)
        self.model.refresh_row(name)
        self.model_updated.emit(name)

    # -- import ------------------------------------------------------------------------------

    def import_gguf(self, path: Path, name: str | None = None) -> bool:
        """Register a local .gguf with the service (`/api/create` from the file's path)."""
        if self.importing:
            self.notice.emit("info", self.tr("An import is already running."))
            return False
        path = Path(path).resolve()
        if not path.is_file():
            self.notice.emit("error", self.tr("%1 is not a file.").replace("%1", str(path)))
            return False
        name = name or model_name_for(path)
        if ":" not in name:
            name += ":latest"  # what the service will list it as
        self.importing = True
        self.import_started.emit(name)
        call = self._client.post(
            "/api/create", {"model": name, "from": str(path), "stream": True}, stream=True
        )
        call.chunk.connect(self._on_create_status)
        call.done.connect(lambda _last, n=name: self._on_imported(n))
        call.failed.connect(lambda err, n=name: self._on_import_failed(n, err))
        return True

    def _on_create_status(self, line: dict[str, Any]) -> None:
        status = str(line.get("status") or "")
        self.import_progress.emit(
            status, int(line.get("completed") or 0), int(line.get("total") or 0)
        )

    def _on_imported(self, name: str) -> None:
        self.importing = False
        self.import_finished.emit(name, True, self.tr("Imported %1").replace("%1", name))
        self.notice.emit("info", self.tr("Imported %1").replace("%1", name))
        self.refresh()

    def _on_import_failed(self, name: str, err: ApiError) -> None:
        self.importing = False
        message = self.tr("Could not import %1: %2").replace("%1", name).replace("%2", err.message)
        self.import_finished.emit(name, False, message)
        self.notice.emit("error", message)

    # -- delete ------------------------------------------------------------------------------

    def delete(self, name: str) -> None:
        call = self._client.delete("/api/delete", {"model": name})
        call.done.connect(lambda _b, n=name: self._on_deleted(n))
        call.failed.connect(
            lambda e, n=name: self.notice.emit(
                "error",
                self.tr("Could not delete %1: %2").replace("%1", n).replace("%2", e.message),
            )
        )

    def _on_deleted(self, name: str) -> None:
        self.deleted.emit(name)
        self.notice.emit("info", self.tr("Deleted %1").replace("%1", name))
        self.refresh()
