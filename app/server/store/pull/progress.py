"""Progress of a pull, as the lines of Ollama's `/api/pull` NDJSON stream.

Ollama writes `{"status": "pulling manifest"}`, then per layer `{"status": "pulling
<first 12 hex digits>", "digest": "sha256:...", "total": N, "completed": M}`, then
`{"status": "verifying sha256 digest"}`, `{"status": "writing manifest"}` and
`{"status": "success"}`; a failure is a last `{"error": "..."}` line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Emit", "status", "pulling"]

Emit = Callable[[dict[str, Any]], None]


def status(text: str) -> dict[str, Any]:
    return {"status": text}


def pulling(digest: str, total: int, completed: int) -> dict[str, Any]:
    return {
        "status": f"pulling {digest[7:19]}",
        "digest": digest,
        "total": total,
        "completed": completed,
    }
