"""Documents in a chat kept in the history database: the one place the desktop app and
`hearth run --attach` go through to attach prepared documents to a sent message, to say what
each user message carries to the model, and what a reply cites."""

from __future__ import annotations

from collections.abc import Sequence

from ..history import ChatStore, Message
from .context import (
    DocumentContext,
    QuestionEmbedder,
    build_context,
    choose_modes,
    document_budget,
    estimate_tokens,
    render_documents,
)
from .index import DocumentIndex, StoredDocument
from .prepare import PreparedDocument
from .records import Citation

__all__ = ["ChatDocuments"]


class ChatDocuments:
    """`store`'s documents; `embed` embeds a question when the user has an embedding model."""

    def __init__(self, store: ChatStore, embed: QuestionEmbedder | None = None) -> None:
        self.index = DocumentIndex(store.connection)
        self.embed = embed

    def message_text(self, message: Message) -> str:
        """What `message` says to the model: its documents block (if any), then its text."""
        if message.role != "user":
            return message.content
        block = render_documents(self.index, message.id)
        return f"{block}\n\n{message.content}" if block else message.content

    def conversation_tokens(self, system_prompt: str, path: Sequence[Message]) -> int:
        """An estimate of the tokens `path` (as sent, documents included) occupies."""
        return estimate_tokens(system_prompt) + sum(
            estimate_tokens(self.message_text(m)) + 8 for m in path
        )

    def preview_modes(
        self,
        prepared: Sequence[PreparedDocument],
        system_prompt: str,
        path: Sequence[Message],
        num_ctx: int,
    ) -> list[str]:
        """How documents waiting to be sent would go in ("whole"/"searched"), for their chips."""
        budget = document_budget(num_ctx, self.conversation_tokens(system_prompt, path))
        sizes = [estimate_tokens(p.document.text_for_estimate()) for p in prepared]
        return choose_modes(sizes, budget)

    def on_sent(
        self,
        message: Message,
        prepared: Sequence[PreparedDocument],
        system_prompt: str,
        earlier: Sequence[Message],
        num_ctx: int,
        embed: QuestionEmbedder | None = None,
    ) -> DocumentContext:
        """`message` was just stored with `prepared` attached (possibly none; an edited
        question has its documents copied first): store them and choose what its prompt
        carries (documents searched for earlier questions are searched again for this one).
        `earlier` is the conversation before it. `embed`, if given, embeds the question
        instead of this object's embedder (the app passes the vector it fetched off the GUI
        thread)."""
        start = len(self.index.documents([message.id]))
        for position, doc in enumerate(prepared, start):
            self.index.add(message.id, position, doc, "whole")
        earlier_docs = self.index.documents([m.id for m in earlier if m.role == "user"])
        searched = [d.id for d in earlier_docs if d.mode == "searched"]
        if not self.index.documents([message.id]) and not searched:
            return DocumentContext("", [])
        return build_context(
            self.index,
            message.id,
            message.content,
            num_ctx,
            self.conversation_tokens(system_prompt, earlier),
            searched,
            embed if embed is not None else self.embed,
        )

    def has_documents(self, messages: Sequence[Message]) -> bool:
        """Whether any of these messages carries documents (then a question is searched)."""
        return bool(self.index.documents([m.id for m in messages if m.role == "user"]))

    def copy(self, source: Message, target: Message) -> None:
        """An edited question keeps its documents (copied in the database, not re-read)."""
        self.index.copy_documents(source.id, target.id)

    def attached(self, message_id: int) -> list[StoredDocument]:
        return self.index.documents([message_id])

    def citations(self, user_message_id: int) -> list[Citation]:
        return self.index.sources(user_message_id)
