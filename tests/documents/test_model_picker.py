"""The one rule that picks the model for a capability (embedding, vision), which the app
applies to its own list of models and the CLI to the service's /api/tags: the preferred model
when it has the capability, else the first (in the service's order) that has it, else none;
without a preference the search stops at the first match (the CLI asks /api/show lazily)."""

from __future__ import annotations

from hearth.documents.embedding import pick_embedding_model
from hearth.documents.service import pick_model

MODELS = [
    ("gemma3:270m", ["completion"]),
    ("unknown:1b", None),  # capabilities not known yet
    ("nomic-embed-text:latest", ["embedding"]),
    ("bge-m3:latest", ["embedding"]),
    ("qwen2.5vl:3b", ["completion", "vision"]),
]


def test_the_first_with_the_capability_in_the_services_order():
    assert pick_embedding_model(MODELS) == "nomic-embed-text:latest"
    assert pick_model(MODELS, "vision") == "qwen2.5vl:3b"
    assert pick_model(MODELS, "tools") == ""
    assert pick_embedding_model([]) == ""


def test_a_preferred_model_wins_only_when_it_has_the_capability():
    assert pick_model(MODELS, "embedding", prefer="bge-m3:latest") == "bge-m3:latest"
    assert pick_model(MODELS, "embedding", prefer="gemma3:270m") == "nomic-embed-text:latest"


def test_without_a_preference_the_search_stops_at_the_first_match():
    seen: list[str] = []

    def listed():
        for name, caps in MODELS:
            seen.append(name)
            yield name, caps

    assert pick_embedding_model(listed()) == "nomic-embed-text:latest"
    assert seen == ["gemma3:270m", "unknown:1b", "nomic-embed-text:latest"]
