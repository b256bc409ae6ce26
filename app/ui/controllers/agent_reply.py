"""The desktop app's one reply path (AgentReply): hearth.agent's loop on a worker thread, each
model turn, call and result committed to the history as it happens and then shown. A reply
without tools is the same loop offered none: one model turn, its request as a plain chat's
(no `tools`, no cap on its length beyond the chat's own num_predict).

The loop blocks (a model turn streams, a call runs, an approval waits for the user), so it runs
on a thread of its own and never on the GUI's. It speaks to the GUI thread only through this
object's signals (queued: they arrive in order, on the GUI thread), and the GUI answers an
approval through `answer()`. Every write to the ChatStore happens on the GUI thread, in the
slots below, before the public signals go out: the screen never holds what the database lacks.

The messages form one line in the chat's tree: user → assistant (its tool calls) → tool
(a result) → tool → assistant → …; each tool message's parent is the message before it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any

from PySide6.QtCore import QObject, Signal

from ...agent.hub import ToolHub, ToolSpec
from ...agent.loop import (
    AgentEvent,
    Approve,
    Decision,
    StepReply,
    ToolCall,
    run_agent,
    turn_options,
)
from ...agent.specs import ToolResult, error_result
from ...history import ChatStore
from ...history.records import DONE, ERROR, STOPPED, STREAMING
from ..api_client import ApiError
from ..widgets.tool_call import ALWAYS, DENY, ONCE, SERVER
from .model_turn import ModelTurn
from .reply import ReplyClock

__all__ = ["AgentReply", "PendingCall", "no_grants", "tool_record"]

_DECISIONS = {
    ONCE: Decision.ALLOW_ONCE,
    ALWAYS: Decision.ALLOW_ALWAYS,
    SERVER: Decision.ALLOW_SERVER,
    DENY: Decision.DENY,
}


def no_grants(ask: Callable[[ToolCall, ToolSpec], Decision]) -> Approve:
    """The policy of a reply without the tools controller: every call is asked about."""
    return ask


class PendingCall:
    """A call waiting for the user: what the approval card shows."""

    def __init__(self, call: ToolCall, spec: ToolSpec) -> None:
        self.call = call
        self.spec = spec


class AgentReply(QObject):
    """A reply being written (`grew`, `ended`, `cancel`, `abandon`,
    `message_id` = the assistant message being written) plus `changed` (a message was added),
    `approval_needed` (a PendingCall; answer with `answer(ONCE|ALWAYS|SERVER|DENY)`; `policy`
    wraps the asking in the user's grants, `ToolsController.policy`) and `steps`
    (model turns taken). `ended` carries `"max_steps": True` in its stats when the loop
    stopped at the step limit, `"repeated": name` when it stopped because the model called
    the tool `name` again with the same arguments. Each model turn's length is capped
    (`turn_options`) unless the chat's options set num_predict."""

    grew = Signal()
    changed = Signal()
    approval_needed = Signal(object)  # PendingCall
    approval_settled = Signal()  # the pending call was answered (or the reply ended)
    ended = Signal(str, object, object)  # DONE, STOPPED or ERROR; stats; ApiError (ERROR only)
    server_failed = Signal(str)  # a sentence: a server of the chat did not start (no tools)

    # from the worker thread to this object's slots (queued to the GUI thread)
    _w_turn = Signal()
    _w_piece = Signal(str, str)
    _w_turn_done = Signal(object, object, object)  # tool calls, stats, final content
    _w_result = Signal(object, object, object)  # tool record, text, images (bytes)
    _w_ask = Signal(object)
    _w_end = Signal(str, object, object)
    _w_failed = Signal(str)

    def __init__(
        self,
        store: ChatStore,
        chat_id: int,
        first_message_id: int,
        body: dict[str, Any],
        turn: ModelTurn,
        hub: ToolHub | None,
        servers: list[str],
        policy: Callable[[Callable[[ToolCall, ToolSpec], Decision]], Approve],
        max_steps: int,
        images: bool = True,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._store = store
        self.chat_id = chat_id
        self.message_id = first_message_id  # the assistant message being written
        self._fresh = True  # the first turn writes into first_message_id
        self._tip = first_message_id  # the newest message of this reply (the next parent)
        self._model = str(body.get("model") or "")
        self._body = body
        self._turn = turn
        self._hub = hub
        self._servers = servers
        self._approve = policy(self._ask)
        self._max_steps = max_steps
        self._images = images  # False: the model cannot see a result's images (a note instead)
        self._cancel = threading.Event()
        self._answers: queue.Queue[str] = queue.Queue()
        self._waiting = False
        self._clock = ReplyClock()
        self.content = ""
        self.thinking = ""
        self.steps = 0
        self.pending: PendingCall | None = None
        self._ended = False
        self._abandoned = False  # at exit: nothing more is written
        self._thread: threading.Thread | None = None
        self._w_turn.connect(self._on_turn)
        self._w_piece.connect(self._on_piece)
        self._w_turn_done.connect(self._on_turn_done)
        self._w_result.connect(self._on_result)
        self._w_ask.connect(self._on_ask)
        self._w_end.connect(self._on_end)
        self._w_failed.connect(self._on_failed)

    # -- the GUI's side ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="hearth-agent", daemon=True)
        self._thread.start()

    def answer(self, choice: str) -> None:
        """The user's answer to the pending call: ONCE, ALWAYS, SERVER or DENY."""
        if self.pending is not None:
            self.pending = None
            self._answers.put(choice)
            self.approval_settled.emit()

    def cancel(self) -> None:
        """Stop: a pending call is denied, the running call and the model turn are stopped;
        `ended` follows with STOPPED."""
        self._cancel.set()
        self._turn.abort()
        if self.pending is not None:
            self.answer(DENY)

    def abandon(self) -> None:
        """At exit: stop the loop and keep what came, marked stopped. No `ended`."""
        self._ended = self._abandoned = True
        self.cancel()
        self._store.update_message(self.message_id, state=STOPPED)

    def wait(self, timeout: float) -> bool:
        """Wait for the worker thread to finish (tests, exit); True when it has."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def _on_turn(self) -> None:
        if self._abandoned:
            return
        self.steps += 1
        self._clock = ReplyClock()
        self.content = self.thinking = ""
        if self._fresh:
            self._fresh = False
            return
        msg = self._store.add_message(
            self.chat_id, self._tip, "assistant", model=self._model, state=STREAMING
        )
        self.message_id = self._tip = msg.id
        self.changed.emit()

    def _on_piece(self, piece: str, thought: str) -> None:
        if self._abandoned:
            return
        self._clock.piece(piece, thought)
        self.content += piece
        self.thinking += thought
        self._store.update_message(self.message_id, content=self.content, thinking=self.thinking)
        self.grew.emit()

    def _on_turn_done(self, calls: list[dict[str, Any]], final: dict[str, Any], text: Any) -> None:
        if self._abandoned:
            return
        stats = self._clock.stats(final)
        changes: dict[str, Any] = {"stats": stats}
        if calls:  # this turn is over; the calls' results and the next turn follow
            changes.update(state=DONE, tool_calls=calls)
        self._last_stats = stats
        self._store.update_message(self.message_id, **changes)
        self.changed.emit()

    def _on_result(self, record: dict[str, Any], text: str, images: list[bytes]) -> None:
        if self._abandoned:
            return
        msg = self._store.add_message(
            self.chat_id, self._tip, "tool", text, images=images, tool=record
        )
        self._tip = msg.id
        self.changed.emit()

    def _on_ask(self, pending: PendingCall) -> None:
        if self._abandoned or self._cancel.is_set():
            self._answers.put(DENY)
            return
        self.pending = pending
        self.approval_needed.emit(pending)

    def _on_failed(self, sentence: str) -> None:
        if not self._abandoned:
            self.server_failed.emit(sentence)

    def _on_end(self, state: str, info: dict[str, Any], err: ApiError | None) -> None:
        if self.pending is not None:
            self.pending = None
            self.approval_settled.emit()
        if self._ended:
            return
        self._ended = True
        stats = dict(getattr(self, "_last_stats", {}) or {})
        if state != DONE:  # of an unfinished turn, only its time to first token
            ttft = self._clock.ttft
            stats = {"ttft": ttft} if ttft is not None else {}
        stats.update(info)
        self.ended.emit(state, stats, err)

    # -- the worker thread ---------------------------------------------------------------------

    def _work(self) -> None:
        info: dict[str, Any] = {}
        state, err = DONE, None
        try:
            specs = self._tool_specs()
            outcome = run_agent(
                self._step,
                self._hub if self._hub is not None else _NO_TOOLS,
                self._body["messages"],
                specs,
                self._approve,
                max_steps=self._max_steps,
                cancel=self._cancel,
                on_event=self._on_event,
                images=self._images,
            )
            if self._cancel.is_set() or outcome.reason == "cancelled":
                state = STOPPED
            elif outcome.reason == "step_limit":
                info = {"max_steps": True}
            elif outcome.reason == "repeated" and outcome.repeated is not None:
                info = {"repeated": outcome.repeated.name}
        except ApiError as e:
            if e.kind == "cancelled" or self._cancel.is_set():
                state = STOPPED
            else:
                state, err = ERROR, e
        except Exception as e:  # the loop's own failure must end the reply, not hang it
            state, err = ERROR, ApiError(str(e) or type(e).__name__, kind="stream")
        self._w_end.emit(state, info, err)

    def _tool_specs(self) -> list[ToolSpec]:
        """The tools of the chat's servers (none without a hub); a server that did not start
        is said through `server_failed`."""
        if self._hub is None or not self._servers:
            return []
        specs = self._hub.tools(self._servers)
        status = self._hub.status()
        for name in self._servers:
            st = status.get(name)
            if st is not None and st.state == "failed":
                self._w_failed.emit(st.error or f"the tool server '{name}' did not start")
        return specs

    def _step(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> StepReply:
        if self._cancel.is_set():
            raise ApiError("cancelled", kind="cancelled")
        self._w_turn.emit()
        body = {**self._body, "messages": messages, "stream": True}
        if self._servers:  # a chat with tools on (even if none started): capped turns
            body["tools"] = tools
            body["options"] = turn_options(self._body.get("options"))
        chunks = self._turn.run(body, lambda p, t: self._w_piece.emit(p, t))
        reply = StepReply.from_chunks(chunks)
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls]
        final: dict[str, Any] = next((c for c in reversed(chunks) if c.get("done")), {})
        self._w_turn_done.emit(calls, final, reply.content)
        return reply

    def _ask(self, call: ToolCall, spec: ToolSpec) -> Decision:
        if self._cancel.is_set():
            return Decision.DENY
        self._w_ask.emit(PendingCall(call, spec))
        choice = self._answers.get()
        return _DECISIONS.get(choice, Decision.DENY)

    def _on_event(self, event: AgentEvent) -> None:
        if event.kind == "result" and event.call is not None and event.result is not None:
            self._w_result.emit(tool_record(event), event.result.text, list(event.result.images))


class _NoTools:
    """The tool caller of a reply offered no tools: the loop never calls it (a call to a tool
    not offered is refused without one), and were it called it would refuse."""

    def call(
        self,
        qualified_name: str,
        arguments: Mapping[str, Any] | None = None,
        cancel: threading.Event | None = None,
    ) -> ToolResult:
        return error_result(f"there is no tool '{qualified_name}'")


_NO_TOOLS = _NoTools()


def tool_record(event: AgentEvent) -> dict[str, Any]:
    """The stored record of a result event: {"call_id", "name", "server", "arguments",
    "decision", "is_error", "truncated", "structured"} (history's `Message.tool`); decision
    is "" for a call never asked about (a tool not offered, or the chat was stopped)."""
    call, result = event.call, event.result
    assert call is not None and result is not None
    return {
        "call_id": call.id,
        "name": call.name,
        "server": event.spec.server if event.spec else "",
        "arguments": call.arguments,
        "decision": event.decision.value if event.decision else "",
        "is_error": result.is_error,
        "truncated": result.truncated,
        "structured": result.structured,
    }
