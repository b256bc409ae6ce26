"""MCP beyond tools in the window: the open chat's servers' prompts (offered in the composer as
`/name arg=value`, or from the MCP menu with a small argument form) and resources (attached like
a document or an image), and the servers' questions during a call (elicitation), answered in a
form.

The hub's requests block (they may start a server), so they run on short-lived threads; their
news reaches this object's slots through queued signals, on the GUI thread. A server's
question arrives on a hub worker thread, which waits (`ask`) until the user answers on the GUI
thread (`answer`), or until the call that asked ends.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from ...agent.content import (
    PromptSpec,
    ResourceContent,
    ResourceSpec,
    parse_prompt_command,
    resource_file_name,
)
from ...agent.elicit import ElicitAnswer, Elicitation
from ...agent.hub import HubError
from ...agent.specs import server_slug
from ...documents import DOCUMENT_SUFFIXES
from ...paths import data_dir
from .chat import ChatController
from .tools import ToolsController

__all__ = ["McpController"]


class McpController(QObject):
    listed = Signal()  # `prompts` and `resources` were listed again
    arguments_needed = Signal(object, object)  # PromptSpec, the values given so far
    question = Signal(object)  # Elicitation: show its form; answer with `answer`
    question_closed = Signal(object)  # Elicitation: the call that asked ended; close its form
    notice = Signal(str, str)  # level, sentence

    _w_listed = Signal(object, object, object)
    _w_messages = Signal(object)
    _w_read = Signal(object, object)
    _w_failed = Signal(str)
    _w_question = Signal(object)
    _w_closed = Signal(object)

    def __init__(
        self,
        tools: ToolsController,
        chat: ChatController,
        folder: Path | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._tools, self._chat = tools, chat
        self._folder = folder or data_dir() / "mcp-resources"
        self.prompts: list[PromptSpec] = []
        self.resources: list[ResourceSpec] = []
        self._answers: dict[int, queue.Queue[ElicitAnswer]] = {}
        self._closed = False
        self._listed_for: list[str] | None = None  # the servers `prompts` are of (None: none)
        self._waiting = ""  # a `/name` sent before the prompts were listed
        self._w_listed.connect(self._on_listed)
        self._w_messages.connect(self._on_messages)
        self._w_read.connect(self._on_read)
        self._w_failed.connect(lambda text: self.notice.emit("error", text))
        self._w_question.connect(self.question)
        self._w_closed.connect(self.question_closed)
        tools.set_elicit_handler(self.ask)
        chat.commands.append(self.handle_command)

    def _servers(self) -> list[str]:
        return [name for name, on in self._chat.tool_servers() if on]

    def _thread(self, work: Callable[[], None]) -> None:
        threading.Thread(target=work, name="hearth-mcp", daemon=True).start()

    # -- listing -----------------------------------------------------------------------------

    def refresh(self) -> None:
        """List the prompts and resources of the open chat's servers again, starting them
        (off the GUI thread; `listed` follows)."""
        servers = self._servers()
        self._listed_for = servers
        if not servers:
            self._on_listed(servers, [], [])
            return

        def work() -> None:
            try:
                hub = self._tools.hub()
                self._w_listed.emit(servers, hub.prompts(servers), hub.resources(servers))
            except RuntimeError:  # the hub closed meanwhile (the app quit)
                pass

        self._thread(work)

    def chat_changed(self) -> None:
        """Another chat, or other servers for this one: what was listed is not theirs. It is
        listed again now when those servers already run; otherwise when the user asks for it
        (the MCP menu, a `/` typed), so opening a chat starts no server."""
        servers = self._servers()
        if servers == self._listed_for:
            return
        self._listed_for = None
        self._on_listed(None, [], [])
        running = self._tools.status()
        if servers and all(running.get(n) and running[n].state == "running" for n in servers):
            self.refresh()

    def want_prompts(self) -> None:
        """The user started typing a `/name`: list the prompts if they are not."""
        if self._listed_for != self._servers():
            self.refresh()

    def _on_listed(
        self, servers: list[str] | None, prompts: list[PromptSpec], resources: list[ResourceSpec]
    ) -> None:
        if servers is not None and servers != self._servers():
            return  # listed for a chat that is no longer open
        self.prompts, self.resources = list(prompts), list(resources)
        self.listed.emit()
        waiting, self._waiting = self._waiting, ""
        if waiting and not self.handle_command(waiting):
            self._chat.send(waiting)  # not a prompt after all: it goes as typed

    def matching(self, text: str) -> list[PromptSpec]:
        """The prompts whose `/name` starts the way `text` (a word after "/") does."""
        word = text[1:].split(" ", 1)[0] if text.startswith("/") else None
        return [] if word is None else [p for p in self.prompts if p.name.startswith(word)]

    # -- prompts -----------------------------------------------------------------------------

    def handle_command(self, text: str) -> bool:
        """The composer's text, before it is sent: `/name arg=value ...` naming a prompt of
        the chat's servers runs it (asking for missing required arguments first) and is not
        sent; True when it was such a command. Before the prompts are listed, the text waits
        for the listing (True), then runs or is sent as typed."""
        if self._servers() and self._listed_for != self._servers():
            self._waiting = text
            self.refresh()
            return True
        try:
            command = parse_prompt_command(text)
        except ValueError as e:
            if any(p.name == text.strip()[1:].split(" ", 1)[0] for p in self.prompts):
                self.notice.emit("error", str(e))
                return True
            return False
        spec = next((p for p in self.prompts if command and p.name == command.name), None)
        if command is None or spec is None:
            return False
        if spec.missing(command.arguments):
            self.arguments_needed.emit(spec, dict(command.arguments))
        else:
            self.use_prompt(spec, command.arguments)
        return True

    def choose_prompt(self, spec: PromptSpec) -> None:
        """The prompt picked from the MCP menu: its form when it takes arguments."""
        if spec.arguments:
            self.arguments_needed.emit(spec, {})
        else:
            self.use_prompt(spec, {})

    def use_prompt(self, spec: PromptSpec, arguments: dict[str, str]) -> None:
        """Get the prompt's messages from its server and add them to the chat (the model
        answers when the last is the user's)."""
        values = {k: v for k, v in arguments.items() if v != ""}

        def work() -> None:
            try:
                self._w_messages.emit(self._tools.hub().get_prompt(spec.server, spec.name, values))
            except HubError as e:
                self._w_failed.emit(str(e))
            except RuntimeError:
                pass

        self._thread(work)

    def _on_messages(self, messages: list[dict[str, Any]]) -> None:
        if not messages:
            self.notice.emit("error", self.tr("The prompt has no messages."))
        elif not self._chat.send_messages(messages):
            self.notice.emit("info", self.tr("Wait for the answer to finish, then use the prompt."))

    # -- resources ---------------------------------------------------------------------------

    def attach_resource(self, spec: ResourceSpec) -> None:
        """Read the resource through its server and attach it: text as a document, an image
        as an image (when the chat's model can see), a PDF or Word file as a document."""

        def work() -> None:
            try:
                self._w_read.emit(spec, self._tools.hub().read_resource(spec.server, spec.uri))
            except HubError as e:
                self._w_failed.emit(str(e))
            except RuntimeError:
                pass

        self._thread(work)

    def _on_read(self, spec: ResourceSpec, parts: list[ResourceContent]) -> None:
        folder = self._folder / server_slug(spec.server)
        folder.mkdir(parents=True, exist_ok=True)
        documents: list[Path] = []
        images: list[bytes] = []
        for i, part in enumerate(parts):
            if part.is_image and part.data is not None:
                images.append(part.data)
                continue
            name = resource_file_name(spec.name or spec.label, part, DOCUMENT_SUFFIXES)
            if not name:
                self.notice.emit(
                    "error",
                    self.tr("%1 is %2, which Hearth cannot attach.")
                    .replace("%1", spec.label)
                    .replace("%2", part.mime_type or self.tr("binary data")),
                )
                continue
            path = folder / (name if i == 0 else f"{i}-{name}")
            if part.text is not None:
                path.write_text(part.text, encoding="utf-8")
            else:
                path.write_bytes(part.data or b"")
            documents.append(path)
        if documents:
            self._chat.attach_documents(documents)
        if images:
            self._chat.attach_images(images)

    # -- a server's question -----------------------------------------------------------------

    def ask(self, q: Elicitation) -> ElicitAnswer:
        """The hub's elicitation handler (a hub worker thread): show the form, wait for the
        answer; "cancel" when the call that asked ended or the app closes meanwhile."""
        if self._closed:
            return ElicitAnswer("cancel")
        answers: queue.Queue[ElicitAnswer] = queue.Queue()
        self._answers[id(q)] = answers
        self._w_question.emit(q)
        try:
            while True:
                try:
                    return answers.get(timeout=0.1)
                except queue.Empty:
                    if q.cancelled.is_set() or self._closed:
                        self._w_closed.emit(q)
                        return ElicitAnswer("cancel")
        finally:
            self._answers.pop(id(q), None)

    def answer(self, q: Elicitation, answer: ElicitAnswer) -> None:
        """The user's answer to `q` (from its form)."""
        waiting = self._answers.get(id(q))
        if waiting is not None:
            waiting.put(answer)

    def close(self) -> None:
        self._closed = True
