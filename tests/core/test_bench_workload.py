"""The bench workload: seeded prompts, the documented mix, and readable problems for bad settings."""

from __future__ import annotations

import pytest

from app.core.bench.workload import WARMUP_MAX_TOKENS, BenchWorkload, parse_concurrencies


def test_same_seed_gives_same_prompts_and_another_seed_differs():
    a, b = BenchWorkload(requests=20, seed=7), BenchWorkload(requests=20, seed=7)
    assert a.prompts() == b.prompts()
    assert BenchWorkload(requests=20, seed=8).prompts() != a.prompts()
    assert len(a.prompts()) == 20
    assert len(set(a.prompts())) == 20  # each request is distinct (no prompt-cache shortcut between them)


def test_each_level_repetition_and_run_has_its_own_first_line_and_the_same_body():
    run = BenchWorkload(requests=6, seed=7).with_nonce()
    other = BenchWorkload(requests=6, seed=7).with_nonce()
    assert run.nonce and other.nonce and run.nonce != other.nonce
    assert run.with_nonce() == run  # a nonce once set is kept
    sets = [run.prompts(1), run.prompts(8), run.prompts(8, 2), other.prompts(1)]
    firsts = [{p.split("\n", 1)[0] for p in prompts} for prompts in sets]
    for i, a in enumerate(firsts):
        for b in firsts[i + 1 :]:
            assert not a & b  # no shared opening: no configuration reuses another's prefix cache
    assert all(p.startswith(f"[run {run.nonce} c8 r2]\n") for p in run.prompts(8, 2))
    bodies = [[p.split("\n", 1)[1] for p in prompts] for prompts in sets]
    assert bodies[0] == bodies[1] == bodies[2] == bodies[3]  # the seeded body and its length stay the same
    same = BenchWorkload(requests=6, seed=7, nonce=run.nonce)
    assert same.prompts(8) == run.prompts(8)  # same seed and nonce: identical prompts
    assert BenchWorkload.from_dict(run.to_dict()).nonce == run.nonce  # recorded with the workload


def test_prompt_lengths_follow_the_mix():
    workload = BenchWorkload(requests=400, prompt_words=(10, 100), prompt_weights=(0.75, 0.25))
    lengths = [len(p.split(". ", 1)[1].split()) for p in workload.prompts()]
    assert set(lengths) == {10, 100}
    short_share = lengths.count(10) / len(lengths)
    assert 0.65 < short_share < 0.85


def test_warmup_prompts_are_short_and_not_the_measured_ones():
    workload = BenchWorkload(warmup=3, prompt_words=(5, 50), prompt_weights=(1.0, 1.0))
    warmups = workload.warmup_prompts()
    assert len(warmups) == 3
    assert all(len(p.split(". ", 1)[1].split()) == 5 for p in warmups)
    assert not set(warmups) & set(workload.prompts())


def test_round_trips_through_a_dict():
    workload = BenchWorkload(concurrencies=(1, 4), requests=5, prompt_words=(3, 9), prompt_weights=(1.0, 2.0))
    data = workload.to_dict()
    assert data["warmup_max_tokens"] == WARMUP_MAX_TOKENS
    assert BenchWorkload.from_dict(data) == workload


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"concurrencies": ()}, "at least one concurrency"),
        ({"concurrencies": (0, 8)}, "between 1 and"),
        ({"requests": 0}, "requests must be at least 1"),
        ({"max_tokens": 0}, "Max tokens"),
        ({"warmup": -1}, "Warm-up"),
        ({"prompt_words": (10, 20), "prompt_weights": (1.0,)}, "one non-negative weight"),
        ({"prompt_weights": (0.0, 0.0, 0.0)}, "weight above 0"),
    ],
)
def test_bad_settings_are_named(changes, words):
    problems = BenchWorkload(**changes).problems()
    assert any(words in p for p in problems), problems


def test_default_workload_has_no_problems():
    assert BenchWorkload().problems() == []


def test_parse_concurrencies():
    assert parse_concurrencies("32, 1,8,8") == (1, 8, 32)
    for bad in ("", "1,x", "0,4", "2000"):
        with pytest.raises(ValueError, match="concurrency"):
            parse_concurrencies(bad)
