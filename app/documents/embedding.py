"""Vectors for chunks and questions from an embedding model, through Hearth's own service
(`POST /api/embed`, Ollama's shape), and the embedding model a user has (the first installed
model whose capabilities name "embedding"). Plain urllib: the app calls it from its worker
thread, the CLI from its main thread."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

__all__ = ["BATCH", "Embedder", "EmbeddingError", "find_embedding_model", "question_embedder"]

BATCH = 32  # chunks per /api/embed request


class EmbeddingError(RuntimeError):
    """The service could not embed (the search falls back to full text alone)."""


def _post(base_url: str, path: str, body: dict[str, Any], token: str, timeout: float) -> Any:
    req = urllib.request.Request(
        base_url.rstrip("/") + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **_auth(token)},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:300]
        raise EmbeddingError(f"{path}: HTTP {e.code} {detail}") from e
    except (OSError, ValueError) as e:
        raise EmbeddingError(f"{path}: {e}") from e


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def find_embedding_model(base_url: str, token: str = "", timeout: float = 30.0) -> str:
    """The first installed model (in /api/tags order) that /api/show says embeds; '' if none."""
    req = urllib.request.Request(base_url.rstrip("/") + "/api/tags", headers=_auth(token))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            models = json.loads(resp.read()).get("models") or []
    except (OSError, ValueError):
        return ""
    for m in models:
        name = str(m.get("name") or m.get("model") or "")
        caps = m.get("capabilities")
        if caps is None:
            try:
                caps = _post(base_url, "/api/show", {"model": name}, token, timeout).get(
                    "capabilities"
                )
            except EmbeddingError:
                continue
        if name and "embedding" in (caps or []):
            return name
    return ""


class Embedder:
    """Embeds texts with `model` on the service at `base_url` (its API key in `token`)."""

    def __init__(self, base_url: str, model: str, token: str = "", timeout: float = 300.0):
        self.base_url, self.model, self.token, self.timeout = base_url, model, token, timeout

    def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            batch = texts[start : start + BATCH]
            body = {"model": self.model, "input": batch, "truncate": True}
            reply = _post(self.base_url, "/api/embed", body, self.token, self.timeout)
            vectors = reply.get("embeddings") or []
            if len(vectors) != len(batch):
                raise EmbeddingError(f"/api/embed gave {len(vectors)} vectors for {len(batch)}")
            out.extend([float(x) for x in v] for v in vectors)
        return out


def question_embedder(embedder: Embedder) -> Callable[[str], tuple[list[float], str] | None]:
    """`embedder` as context.py's QuestionEmbedder: a failing service means no vector (the
    ranking is then BM25's alone), never a lost question."""

    def embed(question: str) -> tuple[list[float], str] | None:
        try:
            return embedder.embed([question])[0], embedder.model
        except EmbeddingError:
            return None

    return embed
