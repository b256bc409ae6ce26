"""Fitting documents into the context, and the prompt that carries them.

The decision, per question: the documents' text (estimated at ESTIMATE_CHARS_PER_TOKEN
characters a token, on the safe side for English and code) is compared with what is left of
`num_ctx` once the conversation so far and a reserve for the reply (a quarter of the context,
at least REPLY_RESERVE_MIN tokens) are taken out. If every document fits, every one goes in
whole. If not, the smallest go in whole while they fill at most half of what is left, and the
rest are searched: their chunks are ranked for the question (index.py) and the best go in, as
many as fit (at most MAX_PASSAGES), each numbered [n] with its page or section. The choice is
stored with the message (documents.mode, message_sources), so a regenerated reply or a
reopened chat sends the same prompt without reading any file again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .index import DocumentIndex, StoredDocument
from .records import Citation, cited_section

__all__ = [
    "ESTIMATE_CHARS_PER_TOKEN",
    "MAX_PASSAGES",
    "DocumentContext",
    "build_context",
    "choose_modes",
    "document_budget",
    "estimate_tokens",
    "render_documents",
]

ESTIMATE_CHARS_PER_TOKEN = 3
REPLY_RESERVE_MIN = 256
MAX_PASSAGES = 12
CITED_FROM_WHOLE = 3  # a document sent whole is cited by its passages that best match
SEARCH_DEPTH = 48  # ranked candidates to fill the passage budget from

INSTRUCTION = (
    "The user attached the documents below. Answer from them. Say which page or section the "
    "answer comes from; cite a numbered passage as [1]."
)

# Embeds a question for hybrid ranking: (vector, model), or None without an embedding model.
QuestionEmbedder = Callable[[str], tuple[list[float], str] | None]


def estimate_tokens(text: str) -> int:
    return len(text) // ESTIMATE_CHARS_PER_TOKEN + 1


def document_budget(num_ctx: int, conversation_tokens: int) -> int:
    """Tokens left for documents: the context less the conversation and the reply's reserve."""
    reserve = max(REPLY_RESERVE_MIN, num_ctx // 4)
    return max(0, num_ctx - reserve - conversation_tokens)


def choose_modes(sizes: Sequence[int], budget: int) -> list[str]:
    """ "whole" or "searched" for documents of `sizes` tokens sharing `budget` tokens."""
    if sum(sizes) <= budget:
        return ["whole"] * len(sizes)
    modes = ["searched"] * len(sizes)
    used = 0
    for i in sorted(range(len(sizes)), key=lambda i: sizes[i]):
        if used + sizes[i] <= budget // 2:
            modes[i], used = "whole", used + sizes[i]
    return modes


def _document_tokens(doc: StoredDocument) -> int:
    return doc.chars // ESTIMATE_CHARS_PER_TOKEN + 8 * max(doc.sections, doc.pages) + 32


@dataclass
class DocumentContext:
    """What a user message carries besides its text: the documents block, and the passages a
    reply to it cites."""

    text: str
    citations: list[Citation]


def build_context(
    index: DocumentIndex,
    message_id: int,
    question: str,
    num_ctx: int,
    conversation_tokens: int,
    earlier_searched: Sequence[int] = (),
    embed: QuestionEmbedder | None = None,
) -> DocumentContext:
    """Decide how `message_id`'s documents go in (whole or searched), choose the passages of
    the searched ones and of `earlier_searched` (documents searched for earlier questions of
    the chat) for `question`, store the choice, and return the prompt block and citations."""
    docs = index.documents([message_id])
    budget = document_budget(num_ctx, conversation_tokens + estimate_tokens(question))
    sizes = [_document_tokens(d) for d in docs]
    modes = choose_modes(sizes, budget)
    for doc, mode in zip(docs, modes, strict=True):
        if doc.mode != mode:
            index.set_mode(doc.id, mode)
    whole = [d.id for d, m in zip(docs, modes, strict=True) if m == "whole"]
    searched = [d.id for d, m in zip(docs, modes, strict=True) if m == "searched"]
    searched += [d for d in earlier_searched if d not in searched]
    left = budget - sum(s for s, m in zip(sizes, modes, strict=True) if m == "whole")
    sources: list[tuple[int, int]] = []
    if searched:
        embedded = embed(question) if embed is not None else None
        vector, model = embedded if embedded is not None else (None, "")
        used = 0
        for hit in index.search(searched, question, SEARCH_DEPTH, vector, model):
            cost = estimate_tokens(hit.text) + 16
            if len(sources) >= MAX_PASSAGES or used + cost > left:
                break
            sources.append((hit.chunk_id, len(sources) + 1))
            used += cost
    if whole:
        sources += [(h.chunk_id, 0) for h in index.search(whole, question, CITED_FROM_WHOLE)]
    index.set_sources(message_id, sources)
    return DocumentContext(render_documents(index, message_id), index.sources(message_id))


def _attrs(doc: StoredDocument) -> str:
    return f'name="{doc.name}" ' + (
        f'pages="{doc.pages}"' if doc.kind == "pdf" else f'sections="{doc.sections}"'
    )


def render_documents(index: DocumentIndex, message_id: int) -> str:
    """The documents block of `message_id`'s prompt, from the database alone ('' if none)."""
    docs = index.documents([message_id])
    passages = [c for c in index.sources(message_id) if c.number]
    if not docs and not passages:
        return ""
    blocks = [INSTRUCTION]
    for doc in docs:
        notes = "".join(f"\nNote: {n}." for n in doc.notes)
        if doc.mode == "whole":
            body: list[str] = []
            section = None
            for _cid, label, text, origin in index.chunks(doc.id):
                heading = cited_section(label, origin)
                if heading != section:
                    body.append(f"\n[{heading}]\n")
                    section = heading
                body.append(text)
            blocks.append(
                f'<document {_attrs(doc)} sent="whole">{notes}{"".join(body)}\n</document>'
            )
    searched = [d for d in docs if d.mode == "searched"]
    if passages or searched:
        names = ", ".join(d.name for d in searched) or "the documents above"
        head = (
            f"{names}: too long to send whole, so these are the {len(passages)} passages that "
            "best match the question, numbered, with their page or section:"
        )
        notes = "".join(f"\nNote ({d.name}): {n}." for d in searched for n in d.notes)
        items = [f"[{c.number}] {c.label()}:\n{c.text}" for c in passages]
        blocks.append("<passages>\n" + head + notes + "\n\n" + "\n\n".join(items) + "\n</passages>")
    return "\n\n".join(blocks)
