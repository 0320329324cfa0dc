"""Documents in a chat, with the real llama.cpp worker (tiny GGUF), the real document index and real PDFs: sent whole
(and kept in llama.cpp's prefix cache on the next turn) or as passages cited with their pages; attachments and
sources saved with the chat and in its exports."""

from __future__ import annotations

import asyncio
import json

import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.chat.conversation import MessageStatus
from app.core.documents.citations import COUNT_KEY, MISSING_KEY, MODE_KEY, PASSAGES, WHOLE, ChatDocument
from app.core.errors import NotFoundError
from app.core.params import LoadParams, SamplingParams
from app.services.chat.document_context import CHAT_COLLECTION
from app.services.chat.exchange import ExportFormat, export_chat
from app.services.chat.history import AsyncConversationStore, ConversationStore
from app.services.chat.session import ChatObserver, ChatSession
from app.services.documents.service import DocumentsService
from app.services.engines.host import EngineHost
from tests.support.documents import page_text, write_docx, write_pdf
from tests.support.gguf_factory import write_tiny_gguf

SAMPLING = SamplingParams(max_tokens=8, temperature=0.0)


def run(coro, timeout: float = 120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def _session(tmp_path, model, n_ctx=2048, sampling=SAMPLING):
    store = await AsyncConversationStore.open(tmp_path / "chats.sqlite3")
    documents = DocumentsService(tmp_path / "documents.sqlite3")
    host = EngineHost(LlamaCppBackend())
    await host.load(str(model), LoadParams(n_ctx=n_ctx))
    return ChatSession(store, host, lambda: sampling, ChatObserver(), documents=documents)


async def _close(session):
    await session.host.close()
    await session.store.aclose()
    await session.documents.service.close()


def _short_pdf(tmp_path):
    return write_pdf(tmp_path / "brief.pdf", [page_text("alpha", 60), page_text("walrus", 60)])


def _long_pdf(tmp_path):
    topics = ["alpha", "bison", "gamma", "delta", "heron", "falcon", "goose", "ibis", "jackal", "koala", "lemur"]
    return write_pdf(tmp_path / "manual.pdf", [page_text(topic, 240) for topic in topics])


def test_documents_that_fit_go_whole_and_the_second_turn_reuses_them(tmp_path, tiny_gguf):
    pdf = _short_pdf(tmp_path)

    async def scenario():
        session = await _session(tmp_path, tiny_gguf)
        try:
            await session.documents.service.index([str(pdf)], "notes")
            await session.new()
            await session.attach_collection("notes")
            first = await session.send("What does the walrus section explain?")
            second = await session.send("And the alpha section?")
            return first, second
        finally:
            await _close(session)

    first, second = run(scenario())
    for reply in (first, second):
        assert reply.status is MessageStatus.COMPLETE
        assert reply.settings[MODE_KEY] == WHOLE and reply.settings[COUNT_KEY] == 1
        (source,) = reply.sources
        assert (source.number, source.path, source.page) == (1, str(pdf), None)
        assert "alpha section explains" in source.text
    document_tokens = first.stats.prompt_tokens - 40  # the prompt is nearly all the document
    assert first.stats.prompt_tokens > 300
    processed = second.stats.prompt_tokens - second.stats.cached_prompt_tokens
    assert second.stats.cached_prompt_tokens >= first.stats.prompt_tokens - 2  # all of turn 1's prompt was kept
    assert processed < document_tokens / 5, (first.stats, second.stats)


def test_a_chat_that_outgrows_its_whole_documents_goes_on_with_passages(tmp_path):
    model = write_tiny_gguf(tmp_path / "chatty.gguf", never_eos=True, name="chatty")  # every reply 300 tokens
    pdf = write_pdf(tmp_path / "guide.pdf", [page_text("alpha", 150), page_text("walrus", 150)])

    async def scenario():
        session = await _session(tmp_path, model, sampling=SamplingParams(max_tokens=300, temperature=0.0))
        try:
            await session.documents.service.index([str(pdf)], "guides")
            await session.new()
            await session.attach_collection("guides")
            return [await session.send(q) for q in ("What about the walrus?", "And the alpha procedure?")]
        finally:
            await _close(session)

    first, second = run(scenario())
    assert first.settings[MODE_KEY] == WHOLE and first.stats.prompt_tokens > 1000
    assert second.settings[MODE_KEY] == PASSAGES  # the document, the first turn and a reply no longer fit whole
    assert second.sources and all(source.page in (1, 2) for source in second.sources)
    assert second.stats.prompt_tokens < first.stats.prompt_tokens + 300


def test_documents_that_do_not_fit_go_as_passages_cited_with_pages(tmp_path, tiny_gguf):
    pdf = _long_pdf(tmp_path)

    async def scenario():
        session = await _session(tmp_path, tiny_gguf)
        try:
            await session.new()
            documents = await session.attach_documents([str(pdf)])  # not indexed yet: indexed before the reply
            reply = await session.send("Which item does the heron procedure explain?")
            sent = session.conversation.messages[-2]
            return documents, reply, sent, session.conversation.id
        finally:
            await _close(session)

    documents, reply, sent, chat_id = run(scenario(), timeout=240)
    assert documents == [ChatDocument(CHAT_COLLECTION, str(pdf))]
    assert reply.settings[MODE_KEY] == PASSAGES and 1 <= len(reply.sources) <= 5
    assert reply.settings[COUNT_KEY] == len(reply.sources)
    best = reply.sources[0]
    assert (best.number, best.path, best.page) == (1, str(pdf), 5)  # heron is the fifth page
    assert "heron" in best.text and best.chunk_id is not None
    assert sent.content == "Which item does the heron procedure explain?"  # the passages were sent, not saved
    with ConversationStore(tmp_path / "chats.sqlite3") as store:  # reopened: documents and sources are there
        saved = store.load(chat_id)
        assert saved.documents == documents
        assert saved.messages[-1].sources == reply.sources
        assert saved.messages[-1].settings[MODE_KEY] == PASSAGES
        markdown = export_chat(store, chat_id, ExportFormat.MARKDOWN)
        page = export_chat(store, chat_id, ExportFormat.HTML)
        data = json.loads(export_chat(store, chat_id, ExportFormat.JSON))
    assert "**Sources**" in markdown and "[1] manual.pdf, p. 5" in markdown and "answered from" in markdown
    assert '<li value="1"><span class="source">manual.pdf, p. 5</span>' in page
    exported = data["chats"][0]
    assert exported["documents"] == [{"collection": CHAT_COLLECTION, "path": str(pdf)}]
    assert exported["messages"][-1]["sources"][0]["page"] == 5


def test_a_detached_document_is_no_longer_sent_and_an_unknown_collection_is_refused(tmp_path, tiny_gguf):
    async def scenario():
        session = await _session(tmp_path, tiny_gguf)
        try:
            await session.new()
            with pytest.raises(NotFoundError) as refused:
                await session.attach_collection("nothing here")
            documents = await session.attach_documents([str(_short_pdf(tmp_path))])
            left = await session.detach_document(documents[0])
            reply = await session.send("hello")
            return refused, left, reply
        finally:
            await _close(session)

    refused, left, reply = run(scenario())
    assert 'There is no collection "nothing here"' in str(refused.value)
    assert left == [] and reply.sources == [] and MODE_KEY not in reply.settings


def test_attached_documents_the_index_no_longer_holds_are_named_in_the_reply_with_what_to_do(tmp_path, tiny_gguf):
    pdf = _short_pdf(tmp_path)

    async def scenario():
        session = await _session(tmp_path, tiny_gguf)
        try:
            service = session.documents.service
            await service.index([str(pdf)], "notes")
            await service.index([str(pdf)], "kept")
            await session.new()
            await session.attach_collection("notes")
            await session.attach_collection("kept")
            await service.remove_collection("notes")  # as an imported chat's collection that is not here
            reply = await session.send("What does the walrus section explain?")
            return reply, session.conversation.id
        finally:
            await _close(session)

    reply, chat_id = run(scenario())
    with ConversationStore(tmp_path / "chats.sqlite3") as store:
        markdown = export_chat(store, chat_id, ExportFormat.MARKDOWN)
    assert reply.status is MessageStatus.COMPLETE and reply.settings[MODE_KEY] == WHOLE
    assert reply.settings[MISSING_KEY] == ["notes (collection)"] and len(reply.sources) == 1
    assert "notes (collection) is not in your document index: index it again" in markdown


def test_an_attached_folder_is_indexed_and_its_documents_go_whole_numbered(tmp_path, tiny_gguf):
    folder = tmp_path / "project"
    folder.mkdir()
    pdf = write_pdf(folder / "a-plan.pdf", [page_text("alpha", 40)])
    docx = write_docx(folder / "b-notes.docx", [("Budget", [page_text("budget", 40)])])

    async def scenario():
        session = await _session(tmp_path, tiny_gguf)
        try:
            await session.new()
            documents = await session.attach_documents([str(folder)])
            reply = await session.send("What is the budget?")
            return documents, reply
        finally:
            await _close(session)

    documents, reply = run(scenario())
    assert documents == [ChatDocument(CHAT_COLLECTION, str(folder))]
    assert reply.settings[MODE_KEY] == WHOLE and reply.settings[COUNT_KEY] == 2
    assert [(s.number, s.path) for s in reply.sources] == [(1, str(pdf)), (2, str(docx))]
    assert "budget section explains" in reply.sources[1].text
