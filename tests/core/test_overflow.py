"""Fitting a chat into the context: each policy at the exact boundary, cuts only at turn starts, the previous cut
kept while it fits (the prompt prefix stays stable), and the latest turn never cut."""

from __future__ import annotations

import asyncio

import pytest

from app.core.chat.conversation import OverflowPolicy
from app.core.chat.overflow import REFILL, ContextFullError, Cut, estimate_tokens, fit, reply_room, turn_starts

SYSTEM = [{"role": "system", "content": "sys"}]  # 1 token


def _turns(*sizes: int) -> list[dict[str, str]]:
    """Alternating user/assistant messages of ``size`` one-word tokens each."""
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": " ".join(["w"] * n)} for i, n in enumerate(sizes)]


async def _words(messages: list[dict[str, str]]) -> int:
    return sum(len(m["content"].split()) for m in messages)


def _fit(turns, limit, policy=OverflowPolicy.DROP_OLDEST, previous=None, system=SYSTEM):
    return asyncio.run(fit(system, turns, limit, _words, policy, previous))


def test_a_chat_that_fits_exactly_is_sent_whole_and_one_token_over_is_cut():
    turns = _turns(10, 10, 10, 10, 5)  # 45 + 1
    whole = _fit(turns, 46)
    assert whole.cut is None and whole.tokens == 46 and whole.messages == SYSTEM + turns
    cut = _fit(turns, 45)
    assert cut.cut == Cut(0, 2) and cut.messages == SYSTEM + turns[2:]  # the oldest turn (question and reply)
    assert cut.tokens <= int(45 * REFILL)


def test_drop_oldest_drops_down_to_the_refill_mark_and_keeps_the_system_prompt():
    turns = _turns(10, 10, 10, 10, 10, 10, 10, 10, 3)  # 83 + 1
    fitted = _fit(turns, 80)
    assert fitted.messages[0] == SYSTEM[0] and fitted.tokens <= 60 and fitted.cut is not None
    assert fitted.messages[1]["role"] == "user" and fitted.cut.start == 0
    # the shallowest such cut: one turn fewer would not reach the refill mark
    shallower = Cut(0, fitted.cut.count - 2)
    assert 1 + sum(len(m["content"].split()) for m in turns[shallower.count :]) > 60


def test_the_previous_cut_is_kept_while_it_still_fits():
    turns = _turns(10, 10, 10, 10, 10, 10, 10, 10, 3)
    first = _fit(turns, 80)
    grown = turns + _turns(0, 4)[1:] + [{"role": "user", "content": "w w"}]  # a reply and a new question
    again = _fit(grown, 80, previous=first.cut)
    assert again.cut == first.cut  # same prefix: the engine's prompt cache still matches
    much_more = grown + _turns(20, 20)
    moved = _fit(much_more, 80, previous=first.cut)
    assert moved.cut is not None and moved.cut.count > first.cut.count and moved.tokens <= 60


def test_truncate_middle_keeps_the_first_turn():
    turns = _turns(6, 6, 10, 10, 10, 10, 10, 10, 3)
    fitted = _fit(turns, 60, OverflowPolicy.TRUNCATE_MIDDLE)
    assert fitted.messages[1:3] == turns[:2] and fitted.cut is not None and fitted.cut.start == 2
    assert fitted.messages[-1] == turns[-1] and fitted.tokens <= 45


def test_stop_refuses_one_token_over_and_says_what_to_do():
    turns = _turns(10, 10, 5)
    assert _fit(turns, 26, OverflowPolicy.STOP).cut is None
    with pytest.raises(ContextFullError, match=r"needs 26 tokens and 25 are free.*fork"):
        _fit(turns, 25, OverflowPolicy.STOP)


def test_the_latest_turn_is_never_cut_and_a_too_long_one_is_refused():
    with pytest.raises(ContextFullError, match=r"latest message .* needs 31 tokens, more than the 20"):
        _fit(_turns(30), 20)
    with pytest.raises(ContextFullError, match="latest message"):
        _fit(_turns(5, 5, 30), 20)  # even with every earlier turn dropped
    tight = _fit(_turns(5, 5, 17), 20)  # above the refill mark but within the limit: sent
    assert tight.cut == Cut(0, 2) and tight.tokens == 18


def test_cuts_fall_only_on_user_messages():
    turns = [{"role": "assistant", "content": "w"}, *_turns(3, 3, 3, 3), {"role": "user", "content": "w"}]
    assert turn_starts(turns) == [0, 1, 3, 5]
    fitted = _fit(turns, 8)
    assert fitted.messages[1]["role"] == "user"


def test_reply_room_and_estimate():
    assert reply_room(4096, 512) == 512 and reply_room(4096, 100_000) == 2048 and reply_room(4096, None) == 1024
    assert estimate_tokens([{"role": "user", "content": "x" * 300}]) == 108


def test_cut_round_trip_and_marker_text():
    assert Cut.from_dict(Cut(2, 3).to_dict()) == Cut(2, 3)
    assert (
        Cut.from_dict({"start": "a"}) is None
        and Cut.from_dict(None) is None
        and Cut.from_dict({"start": 0, "count": 0}) is None
    )
    assert Cut(0, 1).describe().startswith("Message 1 was not sent")
    assert Cut(2, 3).describe().startswith("Messages 3–5 were not sent")
