"""One streamed /api/chat turn, read on a worker thread (the agent loop's model step).

The agent loop runs on a thread of its own and blocks on each turn, so its turns are read here
directly with hearth.client (the one client of the service), object by object, and `abort()`
from any thread ends a turn at once (hearth.client's `Cancel` shuts the socket, which wakes the
blocked read).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...client import Cancel, HearthClient

__all__ = ["ModelTurn"]

# on_piece(content, thinking): a piece of the answer and/or of its reasoning
OnPiece = Callable[[str, str], None]


class ModelTurn:
    """Streams turns from the service through `client`; thread-safe `abort()`."""

    def __init__(self, client: HearthClient) -> None:
        self._client = client
        self._cancel = Cancel()

    def abort(self) -> None:
        """End the turn in progress (and any later one): it raises ApiError kind 'cancelled'."""
        self._cancel.cancel()

    def run(self, body: dict[str, Any], on_piece: OnPiece) -> list[dict[str, Any]]:
        """POST `body` (stream on) to /api/chat and read the reply: its NDJSON objects (for
        `hearth.agent.loop.StepReply.from_chunks`), each piece shown through `on_piece` as it
        comes. Raises ApiError (kind 'cancelled' after `abort()`)."""
        self._cancel.check()
        chunks: list[dict[str, Any]] = []
        for chunk in self._client.stream("/api/chat", body, self._cancel):
            chunks.append(chunk)
            msg = chunk.get("message") or {}
            piece, thought = str(msg.get("content") or ""), str(msg.get("thinking") or "")
            if piece or thought:
                on_piece(piece, thought)
        return chunks
