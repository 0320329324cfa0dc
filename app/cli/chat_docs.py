"""``chat --docs NAME``: answer from your documents (a collection of the index, or a file or folder, indexed first
when the index does not hold it), as a chat with attached documents does in the window."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from app.core.chat.conversation import Conversation, Message, Role
from app.core.documents.citations import ChatDocument
from app.core.errors import NotFoundError
from app.core.params import SamplingParams

if TYPE_CHECKING:
    from app.services.chat.document_context import ChatDocuments, DocumentContext
    from app.services.engines.host import EngineHost
    from app.services.workstation import Workstation


class DocumentsForChat:
    """The Workstation's documents service for one CLI chat; ``close`` closes it."""

    def __init__(self, name: str) -> None:
        from app.services.paths import app_paths
        from app.services.workstation import Workstation

        self.name = name
        self.workstation: Workstation = Workstation.create(app_paths().ensure())
        self.documents: ChatDocuments | None = None
        self.conversation = Conversation()

    async def attach(self, host: EngineHost) -> None:
        """Find (or index) what ``--docs`` names; ``NotFoundError`` for a name that is neither path nor collection."""
        from app.services.chat.document_context import CHAT_COLLECTION, ChatDocuments
        from app.services.documents.scan import absolute

        service = self.workstation.documents
        self.documents = ChatDocuments(service, host)
        if os.path.exists(self.name):
            documents, to_index = await self.documents.resolve([absolute(self.name)])
            if to_index:
                print(f"indexing {', '.join(to_index)} into {CHAT_COLLECTION!r}…", file=sys.stderr, flush=True)
                await service.index(to_index, CHAT_COLLECTION)
        elif await self.documents.has_collection(self.name):
            documents = [ChatDocument(self.name)]
        else:
            raise NotFoundError(
                f"no collection or path named {self.name!r}: index it first (llm-workstation docs add PATH "
                f"--collection {self.name}) or give a file or folder with --docs"
            )
        self.conversation.documents = documents

    async def prompt(
        self, host: EngineHost, messages: list[dict[str, str]], sampling: SamplingParams
    ) -> tuple[list[dict[str, Any]], DocumentContext | None]:
        """The prompt with the documents in their place, and what they added."""
        from app.services.engines.entries import EngineKind

        assert self.documents is not None
        conversation = self.conversation
        for message in messages:
            if message["role"] == "system":
                conversation.system_prompt = message["content"]
            else:
                conversation.messages.append(Message(Role(message["role"]), message["content"]))
        context = await self.documents.context(EngineKind.LLAMACPP, conversation, sampling)
        sent = context.applied(conversation) if context is not None else conversation
        return sent.prompt_messages(), context

    async def close(self) -> None:
        await self.workstation.close()


def figures(context: DocumentContext | None) -> dict[str, Any]:
    """What ``--json`` prints of the documents: how they were sent and the numbered sources."""
    if context is None:
        return {}
    sources = [
        {"number": s.number, "path": s.path, "page": s.page, "text": s.text, "heading": s.heading}
        for s in context.sources
    ]
    return {"documents_mode": context.mode, "documents_caption": context.caption, "sources": sources}


def sources_lines(context: DocumentContext | None) -> list[str]:
    """The sources as printed after the reply: ``[1] report.pdf, p. 3 — /path/report.pdf``."""
    if context is None:
        return []
    lines = [f"({context.caption})"] if context.caption else []
    return lines + [f"[{s.number}] {s.label} — {s.path}" for s in context.sources]
