"""One conversation driven through the engine host: send, stream, stop, regenerate, edit, continue — always saved.

A new chat is a draft until its first message: it is stored then (with any messages a preset seeded), so no
empty chats pile up in the history.

Qt-free: the chat page observes it through ``ChatObserver``; the CLI and tests can drive it directly. Which
engine it asks is ``engine`` (the chat workspace moves it when the user switches engines).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from app.core.chat.conversation import Conversation, Message, MessageStatus, ReplyStats, Role, title_from
from app.core.errors import AppError, BusyError
from app.core.params import SamplingParams
from app.services.chat.history import AsyncConversationStore
from app.services.engines.entries import EngineKind
from app.services.engines.host import EngineHost
from app.services.engines.replies import ReplyStream

log = logging.getLogger(__name__)

PARTIAL_SAVE_INTERVAL_S = 1.5
NEW_TITLE = "New chat"


class ChatObserver:
    """Override what you need; every call happens on the event loop's thread."""

    def conversation_changed(self, conversation: Conversation) -> None: ...

    def reply_started(self, message: Message) -> None: ...

    def reply_queued(self, replies_ahead: int) -> None:
        """The engine runs one reply at a time and others are ahead of this one; it starts when they end."""

    def reply_delta(self, text: str) -> None: ...

    def reply_finished(self, message: Message) -> None: ...

    def failed(self, text: str) -> None: ...


class ChatSession:
    def __init__(
        self,
        store: AsyncConversationStore,
        host: EngineHost,
        sampling: Callable[[], SamplingParams],
        observer: ChatObserver | None = None,
        engine: EngineKind = EngineKind.LLAMACPP,
    ) -> None:
        self.store = store
        self.host = host
        self.engine = engine
        self._sampling = sampling
        self.observer = observer or ChatObserver()
        self.conversation: Conversation | None = None
        self.generating = False
        self._stream: ReplyStream | None = None
        self._parts: list[str] = []

    async def open(self, conversation_id: int) -> Conversation:
        self.conversation = await self.store.load(conversation_id)
        self.observer.conversation_changed(self.conversation)
        return self.conversation

    async def new(
        self, system_prompt: str = "", messages: list[tuple[str, str]] | None = None, title: str = NEW_TITLE
    ) -> Conversation:
        """Start a chat (a draft: stored with its first message); ``messages`` (role, text) seed its history, as a
        Modelfile's MESSAGE lines do."""
        seeded = [Message(Role(role), text) for role, text in messages or [] if role != Role.SYSTEM]
        conversation = Conversation(title=title, system_prompt=system_prompt, messages=seeded)
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

    async def send(self, text: str) -> Message | None:
        """Save the user's message, then generate and save the reply. Returns the reply."""
        conversation = await self._current()
        if conversation.title == NEW_TITLE:
            conversation.title = title_from(text)
            if conversation.id is not None:
                await self.store.rename(conversation.id, conversation.title)
        await self._stored()
        assert conversation.id is not None
        user = await self.store.append_message(conversation.id, Message(Role.USER, text))
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
        """Replace the last reply with a new one."""
        conversation = await self._current()
        last = conversation.messages[-1] if conversation.messages else None
        if last is not None and last.role is Role.ASSISTANT:
            await self._truncate_from(len(conversation.messages) - 1)
        if not conversation.messages:
            return None
        self.observer.conversation_changed(conversation)
        return await self._generate()

    async def edit_and_resend(self, index: int, text: str) -> Message | None:
        """Replace the user message at ``index`` (dropping everything after it) and answer it anew."""
        conversation = await self._current()
        if not (0 <= index < len(conversation.messages)) or conversation.messages[index].role is not Role.USER:
            raise ValueError(f"message {index} is not a user message")
        await self._truncate_from(index)
        return await self.send(text)

    def stop(self) -> None:
        """Stop this chat's reply (on engines that run several replies, only this one)."""
        if self.generating and self._stream is not None:
            self._stream.stop()

    @property
    def reply_text(self) -> str:
        """The reply being generated, so far."""
        return "".join(self._parts)

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
        return conversation

    async def _truncate_from(self, index: int) -> None:
        conversation = await self._current()
        message = conversation.messages[index]
        if conversation.id is not None and message.id is not None:
            await self.store.truncate_after(conversation.id, message.id, inclusive=True)
        del conversation.messages[index:]

    async def _generate(self, continuing: Message | None = None) -> Message | None:
        if self.generating:
            raise BusyError("A reply is already being generated. Stop it first.")
        conversation = await self._stored()
        assert conversation.id is not None
        sampling = self._sampling()
        prompt = conversation.prompt_messages()  # ends with the unfinished reply when continuing
        earlier = continuing.stats if continuing is not None else None
        if continuing is None:
            reply = self._new_reply(sampling)
            await self.store.append_message(conversation.id, reply)
            conversation.messages.append(reply)
        else:
            reply = continuing
            reply.status, reply.error = MessageStatus.STREAMING, None
        self.generating = True
        self.observer.reply_started(reply)
        try:
            await self._stream_into(reply, prompt, sampling)
            if continuing is not None:
                reply.stats = _continued_stats(earlier, reply.stats)
        finally:
            try:
                await self.store.update_message(reply)
            finally:
                self.generating = False
                self.observer.reply_finished(reply)
        return reply

    def _new_reply(self, sampling: SamplingParams) -> Message:
        engine = self.host.engine(self.engine)
        model = engine.model if engine is not None else None
        settings = {**sampling.to_dict(), "n_ctx": model.n_ctx if model else None}
        return Message(
            Role.ASSISTANT, "", MessageStatus.STREAMING, model=model.name if model else None,
            backend=str(self.engine), settings=settings,
        )  # fmt: skip

    async def _stream_into(self, reply: Message, prompt: list[dict[str, str]], sampling: SamplingParams) -> None:
        parts: list[str] = [reply.content] if reply.content else []  # a continued reply keeps what it had
        self._parts = parts
        saving: asyncio.Task[None] | None = None
        last_save = time.monotonic()
        try:
            stream = self._stream = self.host.stream_chat(self.engine, prompt, sampling)
            if stream.waiting:
                self.observer.reply_queued(stream.place or 0)
            async for delta in stream:
                parts.append(delta.text)
                self.observer.reply_delta(delta.text)
                if time.monotonic() - last_save >= PARTIAL_SAVE_INTERVAL_S and (saving is None or saving.done()):
                    reply.content = "".join(parts)
                    saving = asyncio.ensure_future(self.store.update_message(reply))
                    last_save = time.monotonic()
            stats = reply.stats = stream.stats
            stopped = stats is not None and stats.finish_reason == "stopped"
            reply.status = MessageStatus.STOPPED if stopped else MessageStatus.COMPLETE
        except AppError as exc:  # GenerationError included: the partial reply stays in ``parts``
            reply.status, reply.error = MessageStatus.FAILED, str(exc)
            self.observer.failed(str(exc))
        except asyncio.CancelledError:
            reply.status = MessageStatus.STOPPED
            raise
        finally:
            reply.content = "".join(parts)
            ended, self._stream = self._stream, None
            if ended is not None:
                await ended.aclose()
            if saving is not None:
                await asyncio.shield(saving)


def _continued_stats(earlier: ReplyStats | None, now: ReplyStats | None) -> ReplyStats | None:
    """The figures of a reply that was continued: the tokens of both parts, the latest prompt, speed and end."""
    if earlier is None or now is None:
        return now
    return replace(now, completion_tokens=earlier.completion_tokens + now.completion_tokens)
