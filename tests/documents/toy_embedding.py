"""A toy embedding whose answer is known: words of one meaning share a dimension, so a question
in other words than a document's still lands near it (the retrieval and export tests)."""

from __future__ import annotations

import re

_CONCEPTS = {  # a toy embedding: words of one meaning share a dimension
    "harbour": 0, "port": 0, "commission": 1, "authority": 1, "approved": 2, "grant": 2,
    "granted": 2, "lighthouse": 3, "beacon": 3, "restoring": 4, "repair": 4, "kroner": 5,
    "money": 5,
}  # fmt: skip


def _toy_vector(text: str) -> list[float]:
    v = [0.0] * 8
    for w in re.findall(r"\w+", text.lower()):
        if w in _CONCEPTS:
            v[_CONCEPTS[w]] += 1.0
    v[7] = 0.01  # never the zero vector
    return v
