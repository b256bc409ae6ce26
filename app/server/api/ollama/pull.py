"""`POST /api/pull` (Ollama's): download a model from Hugging Face or an Ollama registry,
streaming Ollama's progress lines; and `GET /api/hearth/search?q=` (Hearth's): Hugging Face
repositories with GGUF files, for the desktop app's "Get models".

The manifest is fetched before the response starts, so a missing model (404), the offline
switch (403) or a bad name (400) is an HTTP error with a sentence. The download runs in a
thread; when the client goes away (the CLI is interrupted, the app's Cancel closes the
stream) the stream's end sets the cancel flag and the download stops, leaving its partial
file for the next pull and registering nothing. `stream: false` answers the last line only.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...store.model_store import ModelNotFound
from ...store.pull import Pull, PullCancelled, PullError, offline, prepare
from ...store.pull.hf import search_hf
from ...store.pull.network import check_online
from ..shared.common import service_of
from ..shared.errors import APIError
from ..shared.streams import ndjson_or_last
from .schemas import PullRequest

__all__ = ["router"]

router = APIRouter(tags=["models"])


async def _events(request: Request, job: Pull) -> AsyncIterator[dict[str, Any]]:
    svc = service_of(request)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    cancel = threading.Event()

    def emit(event: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, event)

    registry = svc.infos.registry

    def supported(architecture: str) -> bool:
        try:
            registry.get(architecture)
        except LookupError:
            return False
        return True

    task = asyncio.ensure_future(asyncio.to_thread(job.run, svc.store, emit, cancel, supported))
    try:
        while not (task.done() and queue.empty()):
            get = asyncio.ensure_future(queue.get())
            await asyncio.wait([get, task], return_when=asyncio.FIRST_COMPLETED)
            if get.done():
                yield get.result()
            else:
                get.cancel()
        try:
            task.result()
        except PullError as e:
            yield {"error": e.message}
        except PullCancelled:
            yield {"error": "the pull was cancelled"}
        except OSError as e:
            yield {"error": f"the pull failed: {e}"}
    finally:
        cancel.set()  # the client went away: stop the download (it keeps its partial file)


@router.post("/api/pull", summary="Download a model from Hugging Face or an Ollama registry")
async def pull(body: PullRequest, request: Request) -> Response:
    if offline() and _is_here(request, body.model):
        return JSONResponse({"status": "success"})  # offline, nothing to fetch: as before
    try:
        job = await asyncio.to_thread(prepare, body.model, body.insecure)
    except PullError as e:
        raise APIError(e.status, e.message) from None
    events = _events(request, job)
    return await ndjson_or_last(events, body.stream)


def _is_here(request: Request, model: str) -> bool:
    try:
        service_of(request).store.resolve(model)
    except ModelNotFound:
        return False
    return True


@router.get("/api/hearth/search", summary="Hugging Face repositories with GGUF files")
async def search(q: str = "", limit: int = 20) -> dict[str, Any]:
    query = q.strip()[:200]
    if not query:
        raise APIError(400, "say what to search for: /api/hearth/search?q=WORDS")
    try:
        check_online("a search on Hugging Face")
        found = await asyncio.to_thread(search_hf, query, limit)
    except PullError as e:
        raise APIError(e.status, e.message) from None
    return {"models": [m.to_json() for m in found]}
