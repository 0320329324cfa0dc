"""One conversation driven through the engine host: send, stream, stop, regenerate, edit, continue — always saved.

Regenerate and Edit keep what they replace as versions of that message (see ``app.core.chat.versions``);
``show_version`` switches a message to another of its versions, and the rest of the chat follows it.

A new chat is a draft until its first message: it is stored then (with any messages a preset seeded), so no
empty chats pile up in the history.

Qt-free: the chat page observes it through ``ChatObserver``; the CLI and tests can drive it directly. Which
engine it asks is ``engine`` (the chat workspace moves it when the user switches engines).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.backends.protocol import RequestRefusedError
from app.core.chat.conversation import (
    Attachment,
    Conversation,
    Message,
    MessageStatus,
    OverflowPolicy,
    ReplyStats,
    Role,
    title_from,
)
from app.core.chat.overflow import ContextFullError
from app.core.chat.thinking import ThinkingChoice
from app.core.chat.tool_use import MAX_ROUNDS, Approval, ChatTools
from app.core.chat.versions import Branch, branches, switched
from app.core.documents.citations import ChatDocument
from app.core.errors import AppError, BusyError, NotFoundError
from app.core.lazy_import import lazy_import
from app.core.params import GenerationOptions, SamplingParams
from app.services.chat.attachments import inline_images
from app.services.chat.context_fit import fit_prompt, record_fit
from app.services.chat.document_context import CHAT_COLLECTION, ChatDocuments, DocumentContext
from app.services.chat.history import AsyncConversationStore
from app.services.engines.entries import EngineKind
from app.services.engines.host import EngineHost
from app.services.engines.parallel_replies import ParallelReplyStream
from app.services.engines.replies import ReplyStream

if TYPE_CHECKING:  # the reply reader (parser, thinking) and the tool loop (MCP) load with the first reply
    from app.services.chat import message_reply, tool_loop
    from app.services.documents.service import DocumentsService
    from app.services.engines import reply_formats
    from app.services.mcp.manager import McpManager
else:
    message_reply = lazy_import("app.services.chat.message_reply")
    reply_formats = lazy_import("app.services.engines.reply_formats")
    tool_loop = lazy_import("app.services.chat.tool_loop")


log = logging.getLogger(__name__)

PARTIAL_SAVE_INTERVAL_S = 1.5
NEW_TITLE = "New chat"


class ChatObserver:
    """Override what you need; every call happens on the event loop's thread."""

    def conversation_changed(self, conversation: Conversation) -> None: ...

    def reply_started(self, message: Message) -> None: ...

    def reply_queued(self, replies_ahead: int) -> None:
        """The engine runs one reply at a time and others are ahead of this one, or (the parallel llama.cpp
        engine) all its N slots are busy and this one is ``replies_ahead``-th in its queue; it starts when they end."""

    def reply_delta(self, text: str) -> None:
        """More of the reply's answer."""

    def reply_thinking(self, text: str) -> None:
        """More of the reply's thinking (shown apart from the answer)."""

    def reply_recast(self, thinking: str) -> None:
        """The answer so far was thinking (a closing tag with no opening one followed it): ``thinking`` is all of it
        now, and the answer starts again from nothing."""

    def reply_finished(self, message: Message) -> None:
        """The reply has ended (with its tool rounds: ``message`` is the last of them)."""

    def tools_changed(self, message: Message) -> None:
        """A reply's tool calls changed: calls to show (one waits for the user's decision: ``ChatSession.decide``),
        a decision, a result. The reply's text has ended; the next round (if any) starts with ``reply_started``."""

    def failed(self, text: str) -> None: ...


class ChatSession:
    def __init__(
        self,
        store: AsyncConversationStore,
        host: EngineHost,
        sampling: Callable[[], SamplingParams],
        observer: ChatObserver | None = None,
        engine: EngineKind = EngineKind.LLAMACPP,
        attachments_dir: str = "",
        mcp: McpManager | None = None,
        documents: DocumentsService | Callable[[], DocumentsService] | None = None,
    ) -> None:
        # the document index the chat's attached documents are read from (None: documents cannot be attached)
        self.documents = ChatDocuments(documents, host) if documents is not None else None
        self._indexing: set[asyncio.Task[Any]] = set()  # indexing of attached files the next reply waits for
        self.attachments_dir = attachments_dir  # where the images sent in chats are kept (absolute)
        self.store = store
        self.host = host
        self.engine = engine
        self._sampling = sampling
        self.observer = observer or ChatObserver()
        self.conversation: Conversation | None = None
        self.generating = False
        self._stream: ReplyStream | ParallelReplyStream | None = None
        self._reader: message_reply.MessageReply | None = None
        # thinking on/off and effort (the chat workspace gives the loaded model's saved choice); sent where offered
        self.thinking: Callable[[], ThinkingChoice] = ThinkingChoice
        self.mcp = mcp  # the MCP servers whose tools chats may use (None: no tools)
        self.tools = tool_loop.ToolCalls(mcp, self._tools_changed, self._save_tools)
        # OpenAI's tool_choice for each round of a reply (0, 1, …): "auto" lets the model decide; "required" forces
        # a call (a grammar on llama.cpp), e.g. the first round of a task that needs a tool
        self.tool_choice: Callable[[int], str] = lambda _round: "auto"
        # a speculative reply's speed-up over the model's replies without it (the workstation's speculation guard)
        self.spec_speedup: Callable[[ReplyStats], float | None] = lambda _stats: None
        self._replying: Message | None = None  # the reply whose tool calls are being settled
        self._settling: asyncio.Task[None] | None = None
        self._stopped = False

    async def open(self, conversation_id: int) -> Conversation:
        self.conversation = await self.store.load(conversation_id)
        self.conversation.attachments_dir = self.attachments_dir
        self.observer.conversation_changed(self.conversation)
        return self.conversation

    async def new(
        self, system_prompt: str = "", messages: list[tuple[str, str]] | None = None, title: str = NEW_TITLE
    ) -> Conversation:
        """Start a chat (a draft: stored with its first message); ``messages`` (role, text) seed its history, as a
        Modelfile's MESSAGE lines do."""
        seeded = [Message(Role(role), text) for role, text in messages or [] if role != Role.SYSTEM]
        conversation = Conversation(title=title, system_prompt=system_prompt, messages=seeded)
        conversation.attachments_dir = self.attachments_dir
        self.conversation = conversation
        self.observer.conversation_changed(conversation)
        return conversation

    @property
    def is_draft(self) -> bool:
        """A chat not stored yet (nothing was sent in it)."""
        return self.conversation is not None and self.conversation.id is None

    async def set_system_prompt(self, text: str) -> None:
        conversation = await self._current()
        if conversation.system_prompt != text:
            conversation.system_prompt = text
            if conversation.id is not None:
                await self.store.set_system_prompt(conversation.id, text)

    async def set_overflow(self, policy: OverflowPolicy) -> None:
        """What this chat does when its history fills the model's context (saved with the chat)."""
        conversation = await self._current()
        conversation.overflow = OverflowPolicy(policy)
        if conversation.id is not None:
            await self.store.set_overflow(conversation.id, conversation.overflow)

    async def set_tools(self, tools: ChatTools) -> None:
        """The MCP servers and tools this chat may use (saved with the chat); their servers are started."""
        conversation = await self._current()
        conversation.tools = tools
        if conversation.id is not None:
            await self.store.set_tools(conversation.id, tools)
        await tool_loop.start_servers(self.mcp, tools)

    async def attach_documents(self, paths: Sequence[str]) -> list[ChatDocument]:
        """Attach files or folders (saved with the chat); those the index does not hold yet are indexed now, and
        the next reply waits for it. Returns the chat's documents."""
        if self.documents is None:
            raise AppError("Documents are not available here.")
        documents, to_index = await self.documents.resolve(paths)
        if to_index:
            task = self.documents.service.index(to_index, CHAT_COLLECTION)
            self._indexing.add(task)
            task.add_done_callback(self._indexing.discard)
        return await self._set_documents([*(await self._current()).documents, *documents])

    async def attach_collection(self, name: str) -> list[ChatDocument]:
        """Attach a whole collection of the index (``NotFoundError`` when there is none of that name)."""
        if self.documents is None or not await self.documents.has_collection(name):
            raise NotFoundError(f'There is no collection "{name}": index documents into a collection of that name '
                                "first, or pick one of your collections.")  # fmt: skip
        return await self._set_documents([*(await self._current()).documents, ChatDocument(name)])

    async def detach_document(self, document: ChatDocument) -> list[ChatDocument]:
        """Stop answering from ``document`` (the index keeps it)."""
        return await self._set_documents([d for d in (await self._current()).documents if d != document])

    @property
    def indexing(self) -> bool:
        """Whether attached files are still being indexed (the next reply waits for them)."""
        return any(not task.done() for task in self._indexing)

    async def _set_documents(self, documents: list[ChatDocument]) -> list[ChatDocument]:
        conversation = await self._current()
        conversation.documents = list(dict.fromkeys(documents))
        if conversation.id is not None:
            await self.store.set_documents(conversation.id, conversation.documents)
        self.observer.conversation_changed(conversation)
        return conversation.documents

    async def _document_context(self, conversation: Conversation, sampling: SamplingParams) -> DocumentContext | None:
        """The documents' part of the reply's prompt, once the attached files are indexed."""
        if self.documents is None or not conversation.documents:
            return None
        if self._indexing:
            await asyncio.gather(*list(self._indexing), return_exceptions=True)
        return await self.documents.context(self.engine, conversation, sampling)

    def decide(self, call_id: str, approval: Approval, reason: str = "") -> bool:
        """The user's decision on a tool call waiting for one: approve once, always (for this tool in this chat),
        or deny (``reason`` is sent to the model). False when no such call waits."""
        return self.tools.decide(call_id, approval, reason)

    async def continue_tools(self) -> Message | None:
        """After the round cap (or a Stop once the calls were settled): let the model go on from the results."""
        conversation = await self._current()
        last = conversation.messages[-1] if conversation.messages else None
        if last is None or not last.tool_calls or not all(c.settled for c in last.tool_calls):
            return None
        return await self._generate()

    async def send(self, text: str, attachments: Sequence[Attachment] = ()) -> Message | None:
        """Save the user's message (with its images, already in the attachments folder), then generate and save
        the reply. Returns the reply."""
        return await self._send(text, attachments, [])

    async def _send(self, text: str, attachments: Sequence[Attachment], kept: list[Branch]) -> Message | None:
        """``send``; the new message holds ``kept``, the versions of its place (an edit's)."""
        conversation = await self._current()
        if conversation.title == NEW_TITLE:
            conversation.title = title_from(text or ", ".join(a.name for a in attachments) or NEW_TITLE)
            if conversation.id is not None:
                await self.store.rename(conversation.id, conversation.title)
        await self._stored()
        assert conversation.id is not None
        message = Message(Role.USER, text, attachments=[*attachments], versions=kept, version=len(kept))
        user = await self.store.append_message(conversation.id, message)
        conversation.messages.append(user)
        self.observer.conversation_changed(conversation)
        return await self._generate()

    async def continue_reply(self) -> Message | None:
        """Let the model go on with the last reply (one that stopped at the token limit, or was stopped): the
        prompt ends with that reply unfinished and what the model writes is appended to it. None when the chat
        does not end with a reply to continue."""
        conversation = await self._current()
        last = conversation.messages[-1] if conversation.messages else None
        if last is None or last.role is not Role.ASSISTANT or not last.content:
            return None
        await self._stored()
        return await self._generate(continuing=last)

    async def regenerate(self) -> Message | None:
        """A new version of the last reply; the one it replaces is kept as another version (an empty one is not)."""
        conversation = await self._current()
        last = conversation.messages[-1] if conversation.messages else None
        kept: list[Branch] = []
        if last is not None and last.role is Role.ASSISTANT:
            kept = branches(conversation.messages, len(conversation.messages) - 1)
            if not (last.content or last.reasoning or last.tool_calls):
                del kept[last.version]
            await self._truncate_from(len(conversation.messages) - 1)
        if not conversation.messages:
            return None
        self.observer.conversation_changed(conversation)
        return await self._generate(kept=kept)

    async def edit_and_resend(self, index: int, text: str) -> Message | None:
        """A new version of the user message at ``index``, answered anew; the old one and everything after it are
        kept as its other version (``show_version`` brings them back)."""
        conversation = await self._current()
        if not (0 <= index < len(conversation.messages)) or conversation.messages[index].role is not Role.USER:
            raise ValueError(f"message {index} is not a user message")
        images = conversation.messages[index].attachments  # the edited message keeps its images
        kept = branches(conversation.messages, index)
        await self._truncate_from(index)
        return await self._send(text, images, kept)

    async def show_version(self, index: int, slot: int) -> None:
        """Show version ``slot`` (0-based) of message ``index``; the messages after it follow that version (the
        ones shown before are kept with the version they followed). Saved at once."""
        if self.generating:
            raise BusyError("A reply is being generated. Stop it first.")
        conversation = await self._current()
        if not 0 <= index < len(conversation.messages):
            raise ValueError(f"there is no message {index}")
        tail = switched(conversation.messages, index, slot)
        if conversation.id is not None:
            ids = await self.store.replace_tail(conversation.id, index, tail)
            for message, message_id in zip(tail, ids, strict=True):
                message.id = message_id
        conversation.messages[index:] = tail
        self.observer.conversation_changed(conversation)

    def stop(self) -> None:
        """Stop this chat's reply (on engines that run several replies, only this one): its text, its tool calls
        in flight, and the loop of tool rounds."""
        if not self.generating:
            return
        self._stopped = True
        if self._stream is not None:
            self._stream.stop()
        if self._settling is not None:
            self._settling.cancel()

    @property
    def settling_tools(self) -> bool:
        """Whether the reply is between rounds: its tool calls are being asked about or run."""
        return self._settling is not None and not self._settling.done()

    @property
    def reply_text(self) -> str:
        """The reply being generated, so far (its answer)."""
        return self._reader.content if self._reader is not None else ""

    @property
    def reply_thinking(self) -> str:
        """The thinking of the reply being generated, so far."""
        return self._reader.thinking if self._reader is not None else ""

    async def _current(self) -> Conversation:
        if self.conversation is None:
            await self.new()
        assert self.conversation is not None
        return self.conversation

    async def _stored(self) -> Conversation:
        """The conversation, stored now if it is still a draft (with the messages a preset seeded)."""
        conversation = await self._current()
        if conversation.id is None:
            stored = await self.store.create(title=conversation.title, system_prompt=conversation.system_prompt)
            conversation.id, conversation.updated_at = stored.id, stored.updated_at
            assert conversation.id is not None
            for message in conversation.messages:
                await self.store.append_message(conversation.id, message)
            if conversation.tools.any:
                await self.store.set_tools(conversation.id, conversation.tools)
            if conversation.documents:
                await self.store.set_documents(conversation.id, conversation.documents)
        return conversation

    async def _truncate_from(self, index: int) -> None:
        conversation = await self._current()
        message = conversation.messages[index]
        if conversation.id is not None and message.id is not None:
            await self.store.truncate_after(conversation.id, message.id, inclusive=True)
        del conversation.messages[index:]

    async def _generate(self, continuing: Message | None = None, kept: list[Branch] | None = None) -> Message | None:
        """One reply, then while it calls tools (at most ``MAX_ROUNDS`` rounds): settle its calls and let the model
        answer again from their results. A cap ends it with the last round's calls settled (Continue goes on)."""
        if self.generating:
            raise BusyError("A reply is being generated. Stop it first.")
        conversation = await self._stored()
        self.generating, self._stopped = True, False
        reply: Message | None = None
        try:
            await tool_loop.start_servers(self.mcp, conversation.tools)
            reply = await self._reply_round(conversation, continuing, 0, kept or [])
            rounds = 1
            while reply.tool_calls and reply.status is MessageStatus.COMPLETE and not self._stopped:
                await self._settle(reply)
                if self._stopped or rounds >= MAX_ROUNDS:
                    break
                reply = await self._reply_round(conversation, None, rounds)
                rounds += 1
        finally:
            self.generating = False
            if reply is not None:
                self.observer.reply_finished(reply)
        return reply

    async def _reply_round(
        self, conversation: Conversation, continuing: Message | None, round_: int, kept: list[Branch] | None = None
    ) -> Message:
        """One model reply (the chat's tools offered), streamed and saved; it holds ``kept``, the versions of its
        place (a regenerated reply's)."""
        assert conversation.id is not None
        sampling = self._sampling()
        refused: ContextFullError | None = None
        documents = await self._documents_or_none(conversation, sampling)
        sent = documents.applied(conversation) if documents is not None else conversation
        try:  # ends with the unfinished reply when continuing; cut to the model's context by the chat's policy
            prompt, fit_notes = await fit_prompt(self.host, self.engine, sent, sampling)
        except ContextFullError as exc:  # kept as a failed reply that says what to do; Regenerate tries again
            prompt, fit_notes, refused = [], {}, exc
        except AppError as exc:  # the engine could not count: send it all, the engine says what is wrong
            log.warning("could not fit the chat to the context: %s", exc)
            prompt, fit_notes = sent.prompt_messages(), {}
        if documents is not None:
            fit_notes.update(documents.notes())
        earlier = continuing.stats if continuing is not None else None
        if continuing is None:
            reply = self._new_reply(sampling)
            reply.versions, reply.version = list(kept or []), len(kept or [])
            record_fit(reply.settings, fit_notes)
            reply.sources = documents.sources if documents is not None else []
            await self.store.append_message(conversation.id, reply)
            conversation.messages.append(reply)
        else:
            reply = continuing
            reply.status, reply.error = MessageStatus.STREAMING, None
            record_fit(reply.settings, fit_notes)
            if documents is not None:
                reply.sources = documents.sources
        self.observer.reply_started(reply)
        try:
            if refused is not None:
                reply.status, reply.error = MessageStatus.FAILED, str(refused)
                self.observer.failed(str(refused))
                return reply
            offered = tool_loop.offered_tools(self.mcp, conversation.tools)
            await self._stream_into(reply, prompt, sampling, continuing is not None, offered, round_)
            if continuing is not None:
                reply.stats = _continued_stats(earlier, reply.stats)
        finally:
            await self.store.update_message(reply)
        return reply

    async def _documents_or_none(self, conversation: Conversation, sampling: SamplingParams) -> DocumentContext | None:
        try:
            return await self._document_context(conversation, sampling)
        except AppError as exc:  # the engine could not count, say: the reply goes without its documents
            log.warning("could not add the chat's documents: %s", exc)
            self.observer.failed(f"The chat's documents could not be read: {exc}")
            return None

    async def _settle(self, reply: Message) -> None:
        """Settle the reply's tool calls (Stop cancels them), saved as they are decided and run."""
        conversation = await self._current()
        self._replying = reply
        self._settling = asyncio.ensure_future(self.tools.settle(reply.tool_calls, conversation.tools))
        try:
            await self._settling
        except asyncio.CancelledError:
            if not self._stopped:  # the session's own task was cancelled, not the calls alone
                raise
            reply.status = MessageStatus.STOPPED
        finally:
            self._settling = None
            await self.store.update_message(reply)

    def _unique_ids(self, calls: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """The calls with ids no earlier call of the chat has (Ollama numbers each reply's calls from 0)."""
        used = {c.id for m in self.conversation.messages for c in m.tool_calls} if self.conversation else set()
        out = []
        for call_id, name, arguments in calls:
            unique, n = call_id, 1
            while unique in used:
                n += 1
                unique = f"{call_id}_{n}"
            used.add(unique)
            out.append((unique, name, arguments))
        return out

    def _tools_changed(self) -> None:
        if self._replying is not None:
            self.observer.tools_changed(self._replying)

    async def _save_tools(self) -> None:
        conversation = await self._current()
        if conversation.id is not None:
            await self.store.set_tools(conversation.id, conversation.tools)

    def _with_speedup(self, stats: ReplyStats | None) -> ReplyStats | None:
        if stats is None or stats.spec_mode is None:
            return stats
        return replace(stats, spec_speedup=self.spec_speedup(stats))

    def _new_reply(self, sampling: SamplingParams) -> Message:
        model = self.host.model_info(self.engine)
        settings = {**sampling.to_dict(), "n_ctx": model.n_ctx if model else None}
        return Message(
            Role.ASSISTANT, "", MessageStatus.STREAMING, model=model.name if model else None,
            backend=str(self.engine), settings=settings,
        )  # fmt: skip

    async def _stream_into(
        self, reply: Message, prompt: list[dict[str, Any]], sampling: SamplingParams, continuing: bool = False,
        offered: Sequence[tool_loop.OfferedTool] = (), round_: int = 0,
    ) -> None:  # fmt: skip
        reader = self._reader = message_reply.MessageReply(reply, self.observer, continuing=continuing)
        facts = self.host.facts(self.engine)
        saving: asyncio.Task[None] | None = None
        last_save = time.monotonic()
        try:
            options = await reply_formats.thinking_options(self.host, self.engine, self.thinking())
            if offered:
                tools = [tool.as_function(strict=facts.strict_tools) for tool in offered]
                options = replace(options or GenerationOptions(), tools=tools, tool_choice=self.tool_choice(round_))
            await reader.start(self.host, self.engine, options)
            if not facts.reads_image_files:  # else the engine reads the attached files itself
                prompt = await inline_images(prompt)
            stream = self._stream = self.host.stream_chat(self.engine, prompt, sampling, options)
            stream.on_queued = self.observer.reply_queued  # a parallel engine's queue: known once it is sent
            if self._stopped:  # Stop came while the prompt was being prepared (or waited for its turn)
                stream.stop()
            if stream.waiting:
                self.observer.reply_queued(stream.place or 0)
            async for delta in stream:
                reader.feed(delta)
                if time.monotonic() - last_save >= PARTIAL_SAVE_INTERVAL_S and (saving is None or saving.done()):
                    reader.apply()
                    saving = asyncio.ensure_future(self.store.update_message(reply))
                    last_save = time.monotonic()
            reader.finish(cut=stream.stats is not None and stream.stats.finish_reason == "length")
            stats = reply.stats = self._with_speedup(reader.stats(stream.stats))
            stopped = stats is not None and stats.finish_reason == "stopped"
            reply.status = MessageStatus.STOPPED if stopped else MessageStatus.COMPLETE
            cut = stats is not None and stats.finish_reason == "length" and reader.last_call_cut
            calls = self._unique_ids(reader.calls)
            reply.tool_calls = tool_loop.tool_uses(calls, list(offered), last_cut=cut) if offered else []
        except AppError as exc:  # GenerationError included: the partial reply stays in the reader
            text = str(exc)
            if offered and self.engine is EngineKind.VLLM and isinstance(exc, RequestRefusedError) and "tool" in text:
                text = tool_loop.refused_tools_text(text)
            reply.status, reply.error = MessageStatus.FAILED, text
            self.observer.failed(text)
        except asyncio.CancelledError:
            reply.status = MessageStatus.STOPPED
            raise
        finally:
            reader.finish()  # what the parser held back (a partial tag) is decided now; a no-op once finished
            reader.apply()
            ended, self._stream = self._stream, None
            if ended is not None:
                await ended.aclose()
            if saving is not None:
                await asyncio.shield(saving)


def _continued_stats(earlier: ReplyStats | None, now: ReplyStats | None) -> ReplyStats | None:
    """The figures of a reply that was continued: the tokens of both parts, the latest prompt, speed and end."""
    if earlier is None or now is None:
        return now
    return replace(now, completion_tokens=earlier.completion_tokens + now.completion_tokens,
                   thinking_ms=earlier.thinking_ms, thinking_tokens=earlier.thinking_tokens)  # fmt: skip
