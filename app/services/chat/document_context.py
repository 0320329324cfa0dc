"""What a chat's attached documents add to a reply's prompt: their full text, or the best passages for the question.

Whole: when the documents' full text fits the model's context with the chat's history and room for the reply (the
engine counts the tokens where it can, as ``context_fit`` does), it goes after the system prompt — the same text at
the same place every turn, so llama.cpp keeps it in its cache and only the new turn is processed. Passages: else the
best passages for the latest question (the index's search, kept to the attached files) follow that question.
Either way the sources are numbered and the model is asked to cite them ([1], [2]…).

Qt-free; reading the index runs in a worker thread (``DocumentStore.read``)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from app.backends.protocol import TokenCounting
from app.core.chat.conversation import Conversation, Role
from app.core.chat.overflow import estimate_tokens, reply_room
from app.core.documents import citations as cite
from app.core.documents.citations import ChatDocument, FullText, Passage, Source
from app.core.params import SamplingParams
from app.services.chat import document_text as text
from app.services.documents.search import SearchHit
from app.services.engines.entries import EngineKind
from app.services.engines.host import EngineHost

if TYPE_CHECKING:  # the documents service (its indexer, its parsers) loads where the Workstation makes it
    from app.services.documents.service import DocumentsService

WHOLE_SHARE = 0.85  # the documents go whole while the whole prompt fills at most this share of the room it has
MAX_CHARS_PER_TOKEN = 16  # documents longer than this many characters a token of room are too long without counting
PASSAGES = 5  # passages per question, at most
PASSAGES_SHARE = 0.5  # of the room left after the chat's history
SEARCH_WIDTH = 8  # hits asked of the index per passage wanted (some may lie outside the attached files)
CHAT_COLLECTION = "chat documents"  # where files attached in a chat are indexed (when no collection holds them)
NO_MODEL_CONTEXT = 4096  # tokens assumed when no model is loaded (a chat driven without one, in tests)


@dataclass(frozen=True)
class DocumentContext:
    """What the documents add to one reply's prompt, and the sources it may cite."""

    mode: str  # cite.WHOLE or cite.PASSAGES
    sources: list[Source] = field(default_factory=list)
    system_block: str = ""  # whole: after the chat's system prompt
    question_block: str = ""  # passages: after the latest question
    missing: tuple[str, ...] = ()  # the attached documents the index does not hold (their labels)

    @property
    def caption(self) -> str:
        return cite.mode_caption(self.mode, len(self.sources), self.missing)

    def notes(self) -> dict[str, Any]:
        """What a reply's settings record of it."""
        notes: dict[str, Any] = {cite.MODE_KEY: self.mode, cite.COUNT_KEY: len(self.sources)}
        if self.missing:
            notes[cite.MISSING_KEY] = list(self.missing)
        return notes

    def applied(self, conversation: Conversation) -> Conversation:
        """A copy of ``conversation`` to build the prompt from (never stored): the documents in their place."""
        if self.system_block:
            return replace(conversation, system_prompt=cite.with_system(conversation.system_prompt, self.system_block))
        last = _last_question(conversation)
        if last is None or not self.question_block:
            return conversation
        messages = list(conversation.messages)
        question = messages[last]
        messages[last] = replace(question, content=f"{question.content}\n\n{self.question_block}")
        return replace(conversation, messages=messages)


class ChatDocuments:
    """Builds each reply's ``DocumentContext`` from the document index; remembers the token counts it took."""

    def __init__(self, service: DocumentsService | Callable[[], DocumentsService], host: EngineHost) -> None:
        # the Workstation's service, or how to get it: made (and its modules loaded) when a chat first needs it
        self._service = service
        self.host = host
        # documents too long to send whole: their block's hash → (the prompt's tokens, the chat's messages) then
        self._counted: dict[str, tuple[int, int]] = {}

    @property
    def service(self) -> DocumentsService:
        if callable(self._service):
            self._service = self._service()
        return self._service

    async def context(
        self, kind: EngineKind, conversation: Conversation, sampling: SamplingParams
    ) -> DocumentContext | None:
        """The documents' part of the next reply's prompt; None when the chat has no documents."""
        if not conversation.documents:
            return None
        store = await self.service.open()
        files = await asyncio.to_thread(store.read, lambda db: text.attached_files(db, conversation.documents))
        missing = _missing(conversation.documents, files)
        if not files:
            return DocumentContext(cite.PASSAGES, missing=missing)
        return replace(await self._with_files(kind, conversation, sampling, files), missing=missing)

    async def _with_files(
        self, kind: EngineKind, conversation: Conversation, sampling: SamplingParams, files: list[text.IndexedFile]
    ) -> DocumentContext:
        store = await self.service.open()
        room = self._room(kind, sampling)
        chars = await asyncio.to_thread(store.read, lambda db: text.total_chars(db, files))
        if chars <= room * MAX_CHARS_PER_TOKEN * 2:  # else far too long to count (overlaps counted twice)
            texts = await asyncio.to_thread(store.read, lambda db: text.full_texts(db, files))
            whole = _whole(texts)
            if await self._fits(kind, whole.applied(conversation), whole.system_block, room):
                return whole
        return await self.passages(kind, conversation, room)

    async def passages(self, kind: EngineKind, conversation: Conversation, room: int) -> DocumentContext:
        """The best passages of the attached documents for the chat's latest question, as many as fit half the room
        the chat's history leaves."""
        index = _last_question(conversation)
        question = conversation.messages[index].content if index is not None else ""
        hits = await self.search(question, conversation.documents)
        history = await self._tokens(kind, conversation.prompt_messages())
        budget = max(0, int((room - history) * PASSAGES_SHARE))
        context = _passages(hits)
        while len(context.sources) > 1:
            tokens = await self._tokens(kind, [{"role": "user", "content": context.question_block}])
            if tokens <= budget:
                break
            keep = min(len(context.sources) - 1, max(1, len(context.sources) * budget // max(tokens, 1)))
            context = _passages(hits[:keep])
        return context

    async def search(self, question: str, documents: Sequence[ChatDocument], top: int = PASSAGES) -> list[SearchHit]:
        """The best ``top`` hits for ``question`` among the attached documents, best first."""
        found: dict[int, SearchHit] = {}
        for collection in dict.fromkeys(d.collection for d in documents):
            wanted = [d for d in documents if d.collection == collection]
            hits = await self.service.search(question, collection, top * SEARCH_WIDTH)
            for hit in hits:
                if any(d.path is None or text.is_under(hit.path, d.path) for d in wanted):
                    found.setdefault(hit.chunk_id, hit)
        return sorted(found.values(), key=lambda hit: -hit.score)[:top]

    async def resolve(self, paths: Sequence[str]) -> tuple[list[ChatDocument], list[str]]:
        """The chat documents for files and folders a person attached, and those of them to index first (into
        ``CHAT_COLLECTION``); a path the index already holds keeps its collection."""
        store = await self.service.open()
        known = await asyncio.to_thread(store.read, lambda db: text.known_paths(db, paths))
        documents = [ChatDocument(known.get(path, CHAT_COLLECTION), path) for path in paths]
        return documents, [path for path in paths if path not in known]

    async def has_collection(self, name: str) -> bool:
        store = await self.service.open()
        return await asyncio.to_thread(store.read, lambda db: text.collection_exists(db, name))

    async def page_text(self, source: Source) -> str:
        """The text of the page a passage comes from (a document sent whole: all of it), to show it in context."""
        store = await self.service.open()
        if source.chunk_id is None:
            return await asyncio.to_thread(store.read, lambda db: text.whole_text(db, source.path))
        return await asyncio.to_thread(store.read, lambda db: text.page_text(db, source.path, source.page))

    def _room(self, kind: EngineKind, sampling: SamplingParams) -> int:
        model = self.host.model_info(kind)
        n_ctx = model.n_ctx if model is not None and model.n_ctx else NO_MODEL_CONTEXT
        return n_ctx - reply_room(n_ctx, sampling.max_tokens)

    async def _fits(self, kind: EngineKind, conversation: Conversation, block: str, room: int) -> bool:
        """Whether the prompt with the documents whole fills at most ``WHOLE_SHARE`` of the room; once it did not,
        it is not counted again while the chat only grows (a longer chat, the same documents, no larger context)."""
        limit = int(room * WHOLE_SHARE)
        key, turns = hashlib.sha256(block.encode()).hexdigest(), len(conversation.messages)
        tokens_then, turns_then = self._counted.get(key, (0, 0))
        if len(block) > limit * MAX_CHARS_PER_TOKEN or (tokens_then > limit and turns >= turns_then):
            return False
        tokens = await self._tokens(kind, conversation.prompt_messages())
        if tokens > limit:
            self._counted[key] = (tokens, turns)
        return tokens <= limit

    async def _tokens(self, kind: EngineKind, messages: list[dict[str, Any]]) -> int:
        """The prompt tokens of ``messages``: counted by the engine where it can, else estimated."""
        engine = self.host.engine(kind) if self.host.model_info(kind) is not None else None
        if isinstance(engine, TokenCounting):
            return await self.host.count_tokens(kind, messages)
        return estimate_tokens(messages)


def _missing(documents: Sequence[ChatDocument], files: Sequence[text.IndexedFile]) -> tuple[str, ...]:
    """The labels of the attached documents no indexed file stands for."""
    held = [
        d.label for d in documents
        if not any(f.collection == d.collection and (d.path is None or text.is_under(f.path, d.path)) for f in files)
    ]  # fmt: skip
    return tuple(held)


def _whole(texts: Sequence[FullText]) -> DocumentContext:
    return DocumentContext(cite.WHOLE, cite.whole_sources(texts), system_block=cite.whole_block(texts))


def _passages(hits: Sequence[SearchHit]) -> DocumentContext:
    """The hits as numbered passages, best first."""
    passages = [Passage(h.path, h.page, h.text, h.heading, h.chunk_id, h.start, h.end) for h in hits]
    sources = cite.numbered(passages)
    block = cite.passages_block(sources) if sources else cite.NO_PASSAGES
    return DocumentContext(cite.PASSAGES, sources, question_block=block)


def _last_question(conversation: Conversation) -> int | None:
    for index in range(len(conversation.messages) - 1, -1, -1):
        if conversation.messages[index].role is Role.USER:
            return index
    return None
