"""Getting models from the internet, through the service: `POST /api/pull` (streamed
progress; closing the stream is the cancel, so the service stops the download and registers
nothing) and `GET /api/hearth/search` (Hugging Face repositories with GGUF files). Several
downloads may run at once, one per model name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from PySide6.QtCore import QObject, Signal

from ..api_client import ApiClient, ApiError, Call

__all__ = ["DownloadsController"]


class DownloadsController(QObject):
    started = Signal(str)  # model name
    progress = Signal(str, str, int, int)  # name, status line, completed, total (0: unknown)
    finished = Signal(str, bool, str)  # name, ok, message
    search_results = Signal(list)  # [{"name", "repo", "downloads", "likes", "pipeline_tag"}]
    notice = Signal(str, str)  # level, sentence

    def __init__(
        self, client: ApiClient, offline: Callable[[], bool], parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self._client = client
        self._offline = offline
        self._calls: dict[str, Call] = {}

    def active(self) -> list[str]:
        return list(self._calls)

    def _refused(self) -> bool:
        if self._offline():
            self.notice.emit(
                "error",
                self.tr("Hearth is set to work offline; turn that off to download models."),
            )
            return True
        return False

    def pull(self, name: str) -> bool:
        name = name.strip()
        if not name or name in self._calls or self._refused():
            return False
        call = self._client.post("/api/pull", {"model": name, "stream": True}, stream=True)
        self._calls[name] = call
        call.chunk.connect(lambda line, n=name: self._on_line(n, line))
        call.done.connect(lambda last, n=name: self._on_done(n, last))
        call.failed.connect(lambda err, n=name: self._on_failed(n, err))
        self.started.emit(name)
        return True

    def cancel(self, name: str) -> None:
        call = self._calls.get(name)
        if call is not None:
            call.cancel()

    def _on_line(self, name: str, line: dict[str, Any]) -> None:
        self.progress.emit(
            name,
            str(line.get("status") or ""),
            int(line.get("completed") or 0),
            int(line.get("total") or 0),
        )

    def _on_done(self, name: str, last: Any) -> None:
        self._calls.pop(name, None)
        ok = isinstance(last, dict) and last.get("status") == "success"
        message = (
            self.tr("Downloaded %1").replace("%1", name)
            if ok
            else self.tr("The download of %1 ended early.").replace("%1", name)
        )
        self.finished.emit(name, ok, message)
        self.notice.emit("info" if ok else "error", message)

    def _on_failed(self, name: str, err: ApiError) -> None:
        self._calls.pop(name, None)
        if err.kind == "cancelled":
            message = self.tr("Cancelled the download of %1").replace("%1", name)
            self.finished.emit(name, False, message)
            self.notice.emit("info", message)
            return
        message = self.tr("Could not download %1: %2").replace("%1", name)
        message = message.replace("%2", err.message)
        self.finished.emit(name, False, message)
        self.notice.emit("error", message)

    def search(self, query: str) -> None:
        query = query.strip()
        if not query or self._refused():
            return
        call = self._client.get(f"/api/hearth/search?q={quote(query)}&limit=20", 30000)
        call.done.connect(
            lambda body: self.search_results.emit(
                list(body.get("models", [])) if isinstance(body, dict) else []
            )
        )
        call.failed.connect(
            lambda err: self.notice.emit(
                "error", self.tr("The search failed: %1").replace("%1", err.message)
            )
        )
