"""The speculation guard: its policy on given figures, and the guard on real replies of a tiny model through the
engine host (it takes replies without speculation, turns speculation off in the model's saved settings, says so)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.chat.conversation import ReplyStats
from app.core.params import LoadParams, SamplingParams
from app.services.chat.history import AsyncConversationStore
from app.services.chat.session import ChatSession
from app.services.engines.entries import EngineKind
from app.services.engines.host import EngineHost
from app.services.engines.spec_guard import GuardPolicy, ModelEvidence, SpeculationGuard, usable
from app.services.model_settings import ModelSettingsStore
from tests.support.gguf_factory import write_tiny_gguf

POLICY = GuardPolicy(samples_each_way=3, slower_than=0.97, probe_every=3, refresh_every=20, window=10)


def _plain_replies_taken(evidence: ModelEvidence, replies: int, spec_rate: float, plain_rate: float) -> list[bool]:
    """Run ``replies`` replies as the guard plans them; which went without speculation."""
    plain = []
    for _ in range(replies):
        without = evidence.wants_plain_next()
        plain.append(without)
        evidence.record(not without, plain_rate if without else spec_rate)
    return plain


def test_without_plain_replies_every_third_reply_goes_without_then_one_in_twenty():
    evidence = ModelEvidence(POLICY)
    taken = _plain_replies_taken(evidence, 9 + 40, spec_rate=100.0, plain_rate=50.0)
    assert [i for i, plain in enumerate(taken[:9]) if plain] == [2, 5, 8]
    assert sum(taken[9:]) == 2  # afterwards one in twenty
    assert not evidence.hurts() and not evidence.turned_off


def test_slower_speculation_is_judged_only_with_enough_replies_each_way():
    evidence = ModelEvidence(POLICY)
    for rate in (40.0, 41.0, 39.0):
        evidence.record(True, rate)
    evidence.record(False, 50.0)
    evidence.record(False, 52.0)
    assert evidence.ratio() is None and not evidence.hurts()
    evidence.record(False, 51.0)
    assert evidence.ratio() == pytest.approx(40.0 / 51.0)
    assert evidence.hurts()


def test_about_as_fast_is_not_slower_and_old_replies_drop_out():
    evidence = ModelEvidence(POLICY)
    for _ in range(3):
        evidence.record(False, 50.0)
        evidence.record(True, 49.0)  # 0.98x: within the margin
    assert not evidence.hurts()
    for _ in range(POLICY.window):
        evidence.record(True, 30.0)
    assert list(evidence.with_spec) == [30.0] * POLICY.window and evidence.hurts()


def test_the_speed_up_is_over_the_median_plain_reply_once_there_is_one():
    evidence = ModelEvidence(POLICY)
    evidence.record(True, 90.0)
    assert evidence.speed_up(90.0) is None  # no reply without speculation yet
    for rate in (40.0, 50.0, 60.0):
        evidence.record(False, rate)
    assert evidence.speed_up(90.0) == pytest.approx(1.8)


def test_figures_saved_before_the_speed_up_existed_still_load():
    old = {"completion_tokens": 40, "decode_tokens_per_s": 30.0, "spec_mode": "ngram", "spec_drafted": 8}
    stats = ReplyStats.from_dict(old)
    assert stats is not None and stats.spec_speedup is None and stats.spec_drafted == 8


def test_only_whole_replies_long_enough_count():
    assert usable(ReplyStats(completion_tokens=40, decode_tokens_per_s=30.0, finish_reason="length"), POLICY)
    assert not usable(ReplyStats(completion_tokens=40, decode_tokens_per_s=30.0, finish_reason="stopped"), POLICY)
    assert not usable(ReplyStats(completion_tokens=4, decode_tokens_per_s=30.0, finish_reason="stop"), POLICY)
    assert not usable(ReplyStats(completion_tokens=40, decode_tokens_per_s=None, finish_reason="stop"), POLICY)
    assert not usable(None, POLICY)


def test_the_guard_measures_real_replies_and_turns_speculation_off_for_the_model(tmp_path: Path):
    model = write_tiny_gguf(tmp_path / "model.gguf", context_length=2048, never_eos=True)
    store = ModelSettingsStore(tmp_path / "model-settings.json")
    # any speculative median below 1000x the plain one is "slower": the verdict comes as soon as the evidence does
    policy = GuardPolicy(samples_each_way=2, slower_than=1000.0, probe_every=2, min_tokens=8)
    heard: list[str] = []
    sampling = SamplingParams(temperature=0.0, max_tokens=24, seed=1)

    async def scenario() -> tuple[list[str | None], list[str]]:
        host = EngineHost(LlamaCppBackend())
        guard = SpeculationGuard(host, lambda: store, policy, heard.append)
        modes = []
        try:
            await host.load(str(model), LoadParams(n_ctx=512, speculative="ngram"))
            for _ in range(6):
                reply = host.complete(EngineKind.LLAMACPP, "the cat sat on the mat. the cat sat on the", sampling)
                _ = [delta async for delta in reply]
                assert reply.stats is not None
                modes.append(reply.stats.spec_mode)
            await guard.settled()
            return modes, list(guard.messages)
        finally:
            guard.close()
            await host.close()

    modes, messages = asyncio.run(asyncio.wait_for(scenario(), 120))
    # replies 2 and 4 measure without speculation; with two each way it is judged slower, and off from then on
    assert modes == ["ngram", None, "ngram", None, None, None]
    assert len(messages) == 1 and messages == heard
    assert "slower" in messages[0] and "model.gguf" in messages[0] and "turn it on again" in messages[0]
    saved = ModelSettingsStore(tmp_path / "model-settings.json").get(str(model)).load
    assert saved is not None and saved.speculative == "off"


def test_a_chat_reply_keeps_its_speed_up_over_the_model_without_speculation(tmp_path: Path):
    """A real chat session on the guarded model: a speculative reply before any reply without speculation has no
    speed-up; after one, its decode tok/s over that reply's, saved with the reply's figures in the history."""
    model = write_tiny_gguf(tmp_path / "model.gguf", context_length=2048, never_eos=True)
    policy = GuardPolicy(samples_each_way=3, probe_every=2, min_tokens=8)

    async def scenario() -> tuple[list[ReplyStats | None], list[ReplyStats | None]]:
        store = await AsyncConversationStore.open(tmp_path / "chats.sqlite3")
        host = EngineHost(LlamaCppBackend())
        guard = SpeculationGuard(host, None, policy)
        session = ChatSession(store, host, lambda: SamplingParams(temperature=0.0, max_tokens=24, seed=1))
        session.spec_speedup = guard.speed_up
        try:
            await host.load(str(model), LoadParams(n_ctx=1024, speculative="ngram"))
            await session.new()
            replies = [await session.send("the cat sat on the mat. the cat sat on the mat.") for _ in range(3)]
            assert session.conversation is not None and session.conversation.id is not None
            saved = await store.load(session.conversation.id)
            kept = [m.stats for m in saved.messages if m.role.value == "assistant"]
            return [r.stats if r is not None else None for r in replies], kept
        finally:
            guard.close()
            await host.close()
            await store.aclose()

    stats, saved = asyncio.run(asyncio.wait_for(scenario(), 120))
    first, plain, third = stats
    assert first is not None and first.spec_mode == "ngram" and first.spec_speedup is None
    assert plain is not None and plain.spec_mode is None and plain.spec_speedup is None
    assert third is not None and third.spec_mode == "ngram"
    assert third.decode_tokens_per_s is not None and plain.decode_tokens_per_s is not None
    assert third.spec_speedup == pytest.approx(third.decode_tokens_per_s / plain.decode_tokens_per_s)
    assert [s.spec_speedup if s else None for s in saved] == [None, None, third.spec_speedup]
