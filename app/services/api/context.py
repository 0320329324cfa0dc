"""Fitting a request into its model's context: what the request needs, and the larger context a reload may take.

A request needs its prompt plus room for the reply: ``min(max_tokens, REPLY_ROOM)`` (REPLY_ROOM when it gives no
max_tokens). Not all of max_tokens: clients ask for far more than they use (Claude Code sends 32,000), and a reply
that reaches the end of the context still ends cleanly (``finish_reason: length``), while a prompt that does not fit
cannot be answered at all. A reload rounds the need up to a multiple of CONTEXT_STEP and stops at the model's trained
context and at the largest context the memory estimate says fits (the "fits" verdict the Library shows, with the
loaded context's own KV cache and compute buffers counted as free: a reload gives them back first).

Counting costs what the reply's own start costs (the template rendered, the prompt tokenized), so it is skipped
where an upper bound already fits: one token per byte of the request, or, for an agent's next turn (the same tools,
the messages of the request counted last and more), that count plus the new messages' bytes (``CountMemo``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from app.core.chat.overflow import estimate_tokens
from app.core.gguf.header import GgufFileError, read_gguf_header
from app.core.load_checks import estimate_settings
from app.core.memory.estimate import MemoryEstimate, estimate_memory
from app.core.memory.fit import MachineMemory, largest_fitting_ctx
from app.core.params import LoadParams

if TYPE_CHECKING:
    from app.services.api.fields import GenerationCall

REPLY_ROOM = 1024  # tokens of reply a request is given room for, at most (its max_tokens when smaller)
CONTEXT_STEP = 1024  # a reload's context is a multiple of this
_TEMPLATE_SLACK = 256  # tokens a chat template adds around the messages, at most (beyond 16 per message)
_TOOLS_SLACK = 1024  # ... and around the tools it shows


@dataclass(frozen=True)
class ContextNeed:
    """What a request puts in the context: its chat (or raw ``prompt``), its tools and its ``max_tokens``."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    prompt: str | None = None
    max_tokens: int | None = None

    @classmethod
    def of(cls, call: GenerationCall) -> ContextNeed:
        tools = call.options.tools if call.options is not None else None
        max_tokens = call.sampling.get("max_tokens")
        return cls(call.messages, tools, call.prompt, max_tokens if isinstance(max_tokens, int) else None)

    @property
    def room(self) -> int:
        """Tokens kept for the reply when deciding what fits."""
        return min(self.max_tokens, REPLY_ROOM) if self.max_tokens and self.max_tokens > 0 else REPLY_ROOM

    def bound(self) -> int:
        """More prompt tokens than it can have: a byte-level tokenizer makes at most one token of each byte, and the
        template's framing is bounded. Below the loaded context, nothing needs counting."""
        if self.prompt is not None:
            return len(self.prompt.encode()) + 16
        size = _messages_bound(self._encoded) + _TEMPLATE_SLACK
        if self.tools:
            size += len(self._tools_json) + _TOOLS_SLACK
        return size

    @cached_property
    def _encoded(self) -> tuple[bytes, ...]:
        """Each message as JSON (keys sorted: the same message, the same bytes)."""
        return tuple(json.dumps(m, ensure_ascii=False, sort_keys=True).encode() for m in self.messages)

    @cached_property
    def _tools_json(self) -> bytes:
        return json.dumps(self.tools or [], ensure_ascii=False, sort_keys=True).encode()

    def chat(self) -> list[dict[str, Any]]:
        """The messages to count: a raw prompt as one user turn (a few tokens over, never under)."""
        return [{"role": "user", "content": self.prompt}] if self.prompt is not None else self.messages

    def estimate(self) -> int:
        """A rough upper estimate of the prompt tokens, for an engine that cannot count them (Ollama)."""
        tools = len(json.dumps(self.tools)) // 3 if self.tools else 0
        return estimate_tokens(self.chat()) + tools


def _messages_bound(encoded: tuple[bytes, ...]) -> int:
    return sum(len(m) + 16 for m in encoded)


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


class CountMemo:
    """The last exact count of each model's prompts: a request that extends the one counted last (the same tools,
    its messages and more after them, as an agent's next turn does) has at most that count plus the new messages'
    bytes, so it fits without being counted again where that bound does."""

    def __init__(self) -> None:
        self._last: dict[object, tuple[bytes, tuple[bytes, ...], int]] = {}

    def remember(self, key: object, need: ContextNeed, tokens: int) -> None:
        if need.prompt is None:
            self._last[key] = (_digest(need._tools_json), tuple(_digest(m) for m in need._encoded), tokens)

    def bound(self, key: object, need: ContextNeed) -> int | None:
        """An upper bound of ``need``'s prompt tokens from the last count, None when it does not extend that one."""
        last = self._last.get(key)
        if last is None or need.prompt is not None:
            return None
        tools, messages, tokens = last
        encoded = need._encoded
        if len(encoded) < len(messages) or _digest(need._tools_json) != tools:
            return None
        if any(_digest(m) != d for m, d in zip(encoded, messages, strict=False)):
            return None
        return tokens + _messages_bound(encoded[len(messages) :]) + _TEMPLATE_SLACK


def wanted_context(tokens: int, room: int, trained: int | None) -> int:
    """The context a request of ``tokens`` prompt tokens wants: with the reply's room, rounded up to a multiple of
    CONTEXT_STEP, at most the trained context (when the model says it)."""
    wanted = -(-(tokens + room) // CONTEXT_STEP) * CONTEXT_STEP
    return min(wanted, trained) if trained else wanted


def most_that_fits(path: str, loaded: LoadParams, gpu_layers: int, wanted: int, machine: MachineMemory) -> int | None:
    """The largest context up to ``wanted`` (a multiple of 256, or ``wanted``) that the memory estimate says fits
    ``machine`` for the GGUF at ``path`` reloaded with ``loaded``'s settings; 0 when none does; None when the
    estimate cannot judge this file (llama.cpp's own load decides). Blocking (reads the header)."""
    try:
        header = read_gguf_header(path)
        params = replace(loaded, n_gpu_layers=gpu_layers)
        freed = _given_back(machine, estimate_memory(header, estimate_settings(params)))
        return largest_fitting_ctx(header, estimate_settings(replace(params, n_ctx=wanted)), freed) or 0
    except (GgufFileError, OSError, ValueError, TypeError):
        return None


def _given_back(machine: MachineMemory, loaded: MemoryEstimate) -> MachineMemory:
    """``machine`` with the loaded context's KV cache and compute buffers free again (the weights are not counted:
    memory-mapped, their pages may already show as available)."""
    host = loaded.kv_host_bytes + loaded.compute_host_bytes + loaded.output_bytes
    gpu = list(machine.gpu_free_bytes)
    if gpu:
        gpu[0] += loaded.kv_gpu_bytes + loaded.compute_gpu_bytes
    return replace(machine, ram_available_bytes=machine.ram_available_bytes + host, gpu_free_bytes=tuple(gpu))
