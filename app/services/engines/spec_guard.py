"""Speculative decoding that proves itself: the guard watches the llama.cpp model's replies and turns speculation
off for a model when, on the user's own replies, it makes decoding slower.

The policy (``GuardPolicy``):

- Evidence is the decode tok/s of the user's replies on the loaded model, split by whether the reply speculated;
  a reply counts when it wrote at least ``min_tokens`` tokens and ended by itself or at its token limit (a stopped
  or failed reply says little about speed). The most recent ``window`` replies each way are kept, per model, for
  this session.
- Without enough replies without speculation, the guard takes some: while fewer than ``samples_each_way`` were
  seen, every ``probe_every``-th reply runs without it; after that one in ``refresh_every``, so the comparison
  follows what the user asks now. A reply taken without speculation costs only the speed-up it would have had.
- With at least ``samples_each_way`` replies each way, when the median speculative tok/s is below ``slower_than``
  times the median without (a 10 % margin: on a busy machine one reply's speed varies by more than a few per
  cent), speculation is off for that model: its saved load setting becomes "off", every further reply of the loaded
  model runs without it, and the guard says so in words (the log, and ``notify``).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from app.core.chat.conversation import ReplyStats
from app.core.speculative import parse_speculative
from app.services.engines.entries import EngineKind
from app.services.engines.events import EngineEvent, ModelLoaded, ModelUnloaded, ReplyFigures

log = logging.getLogger("app.services.engines.spec_guard")


@runtime_checkable
class SpeculationSkipping(Protocol):
    """An engine whose next reply can run without its speculative decoding."""

    def skip_speculation_once(self) -> None: ...


@dataclass(frozen=True)
class GuardPolicy:
    samples_each_way: int = 3  # replies with and without speculation before judging
    slower_than: float = 0.9  # speculative median tok/s below this share of the plain median: it hurts
    probe_every: int = 3  # while plain replies are fewer than samples_each_way: every Nth reply goes without
    refresh_every: int = 20  # afterwards: one reply in N goes without
    window: int = 10  # recent replies kept each way
    min_tokens: int = 16  # a reply shorter than this says little about decode speed


@dataclass
class ModelEvidence:
    """Decode tok/s of one model's replies, with and without speculation."""

    policy: GuardPolicy
    with_spec: deque[float] = field(default_factory=deque)
    without: deque[float] = field(default_factory=deque)
    replies_since_plain: int = 0
    turned_off: bool = False

    def record(self, speculated: bool, tokens_per_s: float) -> None:
        kept = self.with_spec if speculated else self.without
        kept.append(tokens_per_s)
        while len(kept) > self.policy.window:
            kept.popleft()
        self.replies_since_plain = self.replies_since_plain + 1 if speculated else 0

    def ratio(self) -> float | None:
        """Median speculative tok/s over median plain tok/s, once there are enough replies each way."""
        enough = self.policy.samples_each_way
        if len(self.with_spec) < enough or len(self.without) < enough:
            return None
        return statistics.median(self.with_spec) / statistics.median(self.without)

    def speed_up(self, tokens_per_s: float) -> float | None:
        """A speculative reply's tok/s over the median plain tok/s; None until a reply without speculation counted."""
        if not self.without:
            return None
        return tokens_per_s / statistics.median(self.without)

    def hurts(self) -> bool:
        ratio = self.ratio()
        return ratio is not None and ratio < self.policy.slower_than

    def wants_plain_next(self) -> bool:
        """Whether the next reply should run without speculation (to measure, or because it is off)."""
        if self.turned_off:
            return True
        few = len(self.without) < self.policy.samples_each_way
        every = self.policy.probe_every if few else self.policy.refresh_every
        return self.replies_since_plain + 1 >= every


def usable(stats: ReplyStats | None, policy: GuardPolicy) -> bool:
    return (
        stats is not None
        and stats.decode_tokens_per_s is not None
        and stats.completion_tokens >= policy.min_tokens
        and stats.finish_reason in ("stop", "length")
    )


class SpeculationGuard:
    """Subscribes to the engine host; ``model_settings`` (a ``ModelSettingsStore``, read lazily) is where a model's
    load setting is turned off (None: in this session only); ``notify`` hears each decision in words."""

    def __init__(
        self,
        host: Any,
        model_settings: Callable[[], Any] | None = None,
        policy: GuardPolicy | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self._host = host
        self._model_settings = model_settings
        self.policy = policy or GuardPolicy()
        self._notify = notify
        self.evidence: dict[str, ModelEvidence] = {}
        self.messages: list[str] = []  # what the guard decided, in words
        self._loaded: tuple[str, str] | None = None  # (entry, mode) of the speculating llama.cpp model
        self._writes: set[asyncio.Future[Any]] = set()
        self._unsubscribe = host.subscribe(self._on_event)

    def close(self) -> None:
        self._unsubscribe()

    def _on_event(self, event: EngineEvent) -> None:
        if getattr(event, "engine", None) is not EngineKind.LLAMACPP:
            return
        if isinstance(event, ModelLoaded):
            self._on_loaded(event)
        elif isinstance(event, ModelUnloaded):
            self._loaded = None
        elif isinstance(event, ReplyFigures) and self._loaded is not None:
            self._on_reply(event.stats)

    def speed_up(self, stats: ReplyStats | None) -> float | None:
        """A speculative reply of the loaded model: its decode tok/s over the median of this model's replies without
        speculation in this session (None for a plain reply, or until there is such a reply)."""
        if stats is None or stats.spec_mode is None or stats.decode_tokens_per_s is None or self._loaded is None:
            return None
        evidence = self.evidence.get(self._loaded[0])
        return evidence.speed_up(stats.decode_tokens_per_s) if evidence is not None else None

    def _on_loaded(self, event: ModelLoaded) -> None:
        try:
            setting = parse_speculative(event.params.speculative)
        except ValueError:
            setting = parse_speculative("off")
        self._loaded = (event.entry, setting.mode) if setting.on and not event.params.embedding else None
        if self._loaded is not None:
            self.evidence[event.entry] = ModelEvidence(self.policy)  # a load that asks for it starts afresh
            self._plan_next(self.evidence[event.entry])

    def _on_reply(self, stats: ReplyStats | None) -> None:
        assert self._loaded is not None
        entry, mode = self._loaded
        evidence = self.evidence[entry]
        if stats is not None and usable(stats, self.policy) and not evidence.turned_off:
            assert stats.decode_tokens_per_s is not None
            evidence.record(stats.spec_mode is not None, stats.decode_tokens_per_s)
            if evidence.hurts():
                self._turn_off(entry, mode, evidence)
        self._plan_next(evidence)

    def _plan_next(self, evidence: ModelEvidence) -> None:
        engine = self._host.engine(EngineKind.LLAMACPP)
        if evidence.wants_plain_next() and isinstance(engine, SpeculationSkipping):
            engine.skip_speculation_once()

    def _turn_off(self, entry: str, mode: str, evidence: ModelEvidence) -> None:
        evidence.turned_off = True
        on, off = statistics.median(evidence.with_spec), statistics.median(evidence.without)
        message = (
            f"Speculative decoding ({mode}) made replies from {Path(entry).name} slower on your prompts: "
            f"{on:.1f} tok/s with it, {off:.1f} tok/s without (medians of the last {len(evidence.with_spec)} and "
            f"{len(evidence.without)} replies). It is now off for this model; turn it on again in the model's "
            "load settings to try it once more."
        )
        self.messages.append(message)
        log.warning(message)
        if self._notify is not None:
            self._notify(message)
        if self._model_settings is not None:
            self._save_off(entry)

    def _save_off(self, entry: str) -> None:
        """The model's saved load setting becomes "off" (the store writes its file: off the event loop)."""
        store = self._model_settings() if self._model_settings is not None else None
        if store is None:
            return

        def write() -> None:
            store.update(entry, load=replace(store.effective_load(entry), speculative="off"))

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            write()
            return
        future = loop.run_in_executor(None, write)
        self._writes.add(future)
        future.add_done_callback(self._written)

    def _written(self, future: asyncio.Future[Any]) -> None:
        self._writes.discard(future)
        if not future.cancelled() and (exc := future.exception()) is not None:
            log.error("Could not save speculative decoding as off for this model: %s", exc)

    async def settled(self) -> None:
        """Wait for the settings writes in flight."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
