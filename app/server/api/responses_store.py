"""The responses `/v1/responses` keeps, so that `previous_response_id` can continue one and
`GET /v1/responses/{id}` can return it.

Responses are kept in memory only, for the service's lifetime, and at most the last
`MAX_STORED` (least recently used first out): a restart forgets them, and a follow-up to a
forgotten one is a 404. A request with `store: false` is not kept.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from fastapi import Request

__all__ = ["MAX_STORED", "StoredResponse", "ResponseStore", "store_of"]

MAX_STORED = 1000


@dataclass(frozen=True)
class StoredResponse:
    """A finished response: its object as returned, and the conversation's items up to it
    (every earlier input, then this request's input; its own output is in `response`)."""

    response: dict[str, Any]
    input_items: list[dict[str, Any]]

    def conversation(self) -> list[dict[str, Any]]:
        """The items a follow-up continues from: the input, then the output."""
        return [*self.input_items, *self.response["output"]]


class ResponseStore:
    """A bounded LRU map from response id to `StoredResponse`."""

    def __init__(self, limit: int = MAX_STORED) -> None:
        self.limit = limit
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()

    def put(self, stored: StoredResponse) -> None:
        key = stored.response["id"]
        self._items[key] = stored
        self._items.move_to_end(key)
        while len(self._items) > self.limit:
            self._items.popitem(last=False)

    def get(self, key: str) -> StoredResponse | None:
        stored = self._items.get(key)
        if stored is not None:
            self._items.move_to_end(key)
        return stored

    def delete(self, key: str) -> bool:
        return self._items.pop(key, None) is not None

    def __len__(self) -> int:
        return len(self._items)


def store_of(request: Request) -> ResponseStore:
    """The app's response store (made on first use: one per app)."""
    state = request.app.state
    if not hasattr(state, "responses"):
        state.responses = ResponseStore()
    return state.responses  # type: ignore[no-any-return]
