"""OpenAI response bodies and stream chunks: chat completions (``chat.completion`` / ``chat.completion.chunk``) and
text completions (``text_completion``), with usage, finish reasons, logprobs and tool calls."""

from __future__ import annotations

import time
from typing import Any

from app.core.chat.conversation import ReplyStats
from app.core.chat.reply_reader import CallArgs, CallStart, RecastOut, TextOut, ThinkingOut
from app.services.api.replies import CollectedReply, Out, new_call_id


def usage(stats: ReplyStats | None) -> dict[str, int]:
    prompt = stats.prompt_tokens if stats else 0
    completion = stats.completion_tokens if stats else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class ChatChunks:
    """The chunks of one streamed chat completion. With ``include_usage`` every chunk has ``usage: null`` and a
    last chunk with no choices carries the usage, as OpenAI streams it."""

    def __init__(self, model: str, include_usage: bool, *, completion: bool = False) -> None:
        self.id = new_call_id("cmpl-" if completion else "chatcmpl-")
        self.model = model
        self.created = int(time.time())
        self.include_usage = include_usage
        self.completion = completion

    def _chunk(self, choice: dict[str, Any]) -> dict[str, Any]:
        kind = "text_completion" if self.completion else "chat.completion.chunk"
        chunk = {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                 "system_fingerprint": None, "choices": [{"index": 0, **choice}]}  # fmt: skip
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def first(self) -> list[dict[str, Any]]:
        if self.completion:
            return []
        return [self._chunk({"delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None})]

    def outs(self, outs: list[Out]) -> list[dict[str, Any]]:
        chunks = []
        for out in outs:
            if self.completion:
                if isinstance(out, TextOut):
                    chunks.append(self._chunk({"text": out.text, "logprobs": completion_logprobs(out.logprobs),
                                               "finish_reason": None}))  # fmt: skip
                continue
            delta: dict[str, Any]
            logprobs = None
            if isinstance(out, TextOut):
                delta = {"content": out.text}
                logprobs = {"content": out.logprobs, "refusal": None} if out.logprobs else None
                if not out.text and not out.logprobs:
                    continue
            elif isinstance(out, ThinkingOut):
                delta = {"reasoning_content": out.text}
            elif isinstance(out, CallStart):
                delta = {"tool_calls": [{"index": out.index, "id": out.id, "type": "function",
                                         "function": {"name": out.name, "arguments": ""}}]}  # fmt: skip
            elif isinstance(out, RecastOut):
                continue  # what was streamed as content stays sent
            else:
                assert isinstance(out, CallArgs)
                delta = {"tool_calls": [{"index": out.index, "function": {"arguments": out.text}}]}
            chunks.append(self._chunk({"delta": delta, "logprobs": logprobs, "finish_reason": None}))
        return chunks

    def last(self, finish_reason: str, stats: ReplyStats | None) -> list[dict[str, Any]]:
        key = "text" if self.completion else "delta"
        chunks = [self._chunk({key: "" if self.completion else {}, "logprobs": None, "finish_reason": finish_reason})]
        if self.include_usage:
            kind = "text_completion" if self.completion else "chat.completion.chunk"
            chunks.append({"id": self.id, "object": kind, "created": self.created, "model": self.model,
                           "system_fingerprint": None, "choices": [], "usage": usage(stats)})  # fmt: skip
        return chunks


def chat_completion(model: str, reply: CollectedReply, finish_reason: str, stats: ReplyStats | None,
                    *, want_logprobs: bool) -> dict[str, Any]:  # fmt: skip
    message: dict[str, Any] = {"role": "assistant", "content": reply.text if reply.text or not reply.calls else None}
    if reply.thinking:
        message["reasoning_content"] = reply.thinking
    if reply.calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in reply.calls
        ]
    logprobs = {"content": reply.logprobs, "refusal": None} if want_logprobs else None
    return {
        "id": new_call_id("chatcmpl-"), "object": "chat.completion", "created": int(time.time()), "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}],
        "usage": usage(stats),
    }  # fmt: skip


def text_completion(model: str, reply: CollectedReply, finish_reason: str, stats: ReplyStats | None,
                    *, want_logprobs: bool) -> dict[str, Any]:  # fmt: skip
    logprobs = completion_logprobs(reply.logprobs) if want_logprobs else None
    return {
        "id": new_call_id("cmpl-"), "object": "text_completion", "created": int(time.time()), "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "text": reply.text, "logprobs": logprobs, "finish_reason": finish_reason}],
        "usage": usage(stats),
    }  # fmt: skip


def completion_logprobs(entries: list[dict[str, Any]] | None, offset: int = 0) -> dict[str, Any] | None:
    """Chat-shaped entries in the legacy completions shape (tokens, token_logprobs, top_logprobs, text_offset)."""
    if not entries:
        return None
    offsets, at = [], offset
    for entry in entries:
        offsets.append(at)
        at += len(entry["token"])
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [  # an echoed prompt's first token has none (null), as OpenAI's
            None if e["logprob"] is None else {t["token"]: t["logprob"] for t in e.get("top_logprobs") or []}
            for e in entries
        ],
        "text_offset": offsets,
    }


def embeddings_body(model: str, vectors: list[list[float]], encoding: str | None, tokens: int = 0) -> dict[str, Any]:
    """OpenAI's embeddings list; ``tokens``: the inputs' token count (its usage: embeddings have no completion)."""
    import base64

    import numpy as np

    data = []
    for index, vector in enumerate(vectors):
        value: Any = vector
        if encoding == "base64":
            value = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
        data.append({"object": "embedding", "index": index, "embedding": value})
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
