"""The responses `/v1/responses` keeps, so that `previous_response_id` can continue one and
`GET /v1/responses/{id}` can return it.

Responses are kept in memory only, for the service's lifetime: at most the last
`MAX_STORED` of them and `MAX_STORED_BYTES` in all (least recently used first out). An
entry's size is its JSON's (the response and the conversation up to it, images included as
the data URLs they came in); one larger than the whole cap is not kept. A restart forgets
them, and a follow-up to a forgotten one (or one never kept) is a 404 saying so
(`forgotten_sentence`). A request with `store: false` is not kept.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from fastapi import Request

__all__ = [
    "MAX_STORED",
    "MAX_STORED_BYTES",
    "StoredResponse",
    "ResponseStore",
    "forgotten_sentence",
    "store_of",
]

MAX_STORED = 1000
MAX_STORED_BYTES = 128 * 2**20  # 128 MiB of JSON in all


@dataclass(frozen=True)
class StoredResponse:
    """A finished response: its object as returned, and the conversation's items up to it
    (every earlier input, then this request's input; its own output is in `response`)."""

    response: dict[str, Any]
    input_items: list[dict[str, Any]]

    def conversation(self) -> list[dict[str, Any]]:
        """The items a follow-up continues from: the input, then the output."""
        return [*self.input_items, *self.response["output"]]

    def nbytes(self) -> int:
        """The entry's size as the store counts it: its response's and input's JSON bytes."""
        text = json.dumps([self.response, self.input_items], ensure_ascii=False, default=str)
        return len(text.encode("utf-8", "surrogatepass"))


class ResponseStore:
    """A map from response id to `StoredResponse`, bounded in entries (`limit`) and in bytes
    (`max_bytes`, counted by `StoredResponse.nbytes`), the least recently used out first."""

    def __init__(self, limit: int = MAX_STORED, max_bytes: int = MAX_STORED_BYTES) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        self.nbytes = 0  # the kept entries' bytes
        self._items: OrderedDict[str, tuple[StoredResponse, int]] = OrderedDict()

    def put(self, stored: StoredResponse) -> bool:
        """Keep `stored` (True), dropping the least recently used entries until both bounds
        hold; an entry larger than `max_bytes` is not kept (False, and an earlier entry of its
        id is dropped)."""
        key = stored.response["id"]
        self.delete(key)
        size = stored.nbytes()
        if size > self.max_bytes:
            return False
        self._items[key] = (stored, size)
        self.nbytes += size
        while len(self._items) > self.limit or self.nbytes > self.max_bytes:
            _, (_, dropped) = self._items.popitem(last=False)
            self.nbytes -= dropped
        return True

    def get(self, key: str) -> StoredResponse | None:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def delete(self, key: str) -> bool:
        item = self._items.pop(key, None)
        if item is None:
            return False
        self.nbytes -= item[1]
        return True

    def __len__(self) -> int:
        return len(self._items)


def forgotten_sentence(response_id: str, store: ResponseStore) -> str:
    """The 404's sentence for an id the store does not hold (unknown, forgotten, never kept)."""
    return (
        f"no response with id '{response_id[:80]}': this service keeps its last responses in "
        f"memory only (at most {store.limit} of them and {store.max_bytes / 2**20:g} MiB in "
        "all, the least recently used forgotten first; a larger one is not kept; none across "
        "restarts, nor those sent with store: false)"
    )


def store_of(request: Request) -> ResponseStore:
    """The app's response store (made on first use: one per app)."""
    state = request.app.state
    if not hasattr(state, "responses"):
        state.responses = ResponseStore()
    return state.responses  # type: ignore[no-any-return]
