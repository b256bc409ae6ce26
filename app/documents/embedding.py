"""Vectors for chunks and questions from an embedding model, through Hearth's own service
(`POST /api/embed`, Ollama's shape), and the embedding model a user has (the first installed
model whose capabilities name "embedding": service.py's `pick_model`, which the app applies to
its own list of models), through service.py."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .service import ServiceCallError, find_model, pick_model, post_json

__all__ = [
    "BATCH",
    "Embedder",
    "EmbeddingError",
    "EMBEDDING",
    "find_embedding_model",
    "pick_embedding_model",
    "question_embedder",
]

EMBEDDING = "embedding"  # the capability /api/show names

BATCH = 32  # chunks per /api/embed request


class EmbeddingError(ServiceCallError):
    """The service could not embed (the search falls back to full text alone)."""


def _post(base_url: str, path: str, body: dict[str, Any], token: str, timeout: float) -> Any:
    return post_json(base_url, path, body, token, timeout, EmbeddingError)


def find_embedding_model(base_url: str, token: str = "", timeout: float = 30.0) -> str:
    """The first installed model (in /api/tags order) that /api/show says embeds; '' if none."""
    return find_model(base_url, EMBEDDING, token, timeout=timeout)


def pick_embedding_model(models: Iterable[tuple[str, Sequence[str] | None]]) -> str:
    """The embedding model among `models` ((name, capabilities), in /api/tags order) by the
    same rule as `find_embedding_model`: the app's picker over the list it already has."""
    return pick_model(models, EMBEDDING)


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
