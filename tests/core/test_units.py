"""The one place sizes, rates, durations and moments are worded (app/core/units.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.core.units import (
    MISSING,
    GiB,
    KiB,
    MiB,
    TiB,
    format_byte_rate,
    format_bytes,
    format_duration,
    format_span,
    format_tokens_per_s,
    relative_time,
    seconds_from_now,
)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("n_bytes", "text"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (1023, "1023 B"),
        (1023.6, "1.0 KiB"),  # rounds to 1024 B: the next unit
        (KiB, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (MiB - 1, "1.0 MiB"),  # 1023.999 KiB would print as 1024.0 KiB
        (274 * MiB, "274.0 MiB"),
        (3 * GiB, "3.0 GiB"),
        (int(7.25 * GiB), "7.2 GiB"),
        (2_000_000_000, "1.9 GiB"),  # binary: not "2.0 GB"
        (3 * TiB, "3.0 TiB"),
        (5000 * TiB, "5000.0 TiB"),  # no larger unit
        (-1536, "-1.5 KiB"),
        (None, MISSING),
    ],
)
def test_bytes_are_binary_with_one_decimal(n_bytes, text):
    assert format_bytes(n_bytes) == text


def test_rates():
    assert format_byte_rate(12.5 * MiB) == "12.5 MiB/s"
    assert format_byte_rate(None) == MISSING
    assert format_tokens_per_s(41.66) == "41.7 tok/s"
    assert format_tokens_per_s(1234.5) == "1,234.5 tok/s"
    assert format_tokens_per_s(None) == MISSING


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (0.4, "0 s"),
        (41.6, "42 s"),
        (59.4, "59 s"),
        (59.6, "1:00"),
        (185, "3:05"),
        (3723, "1:02:03"),
        (100 * 3600, "100:00:00"),
        (-5, "0 s"),
        (None, MISSING),
    ],
)
def test_durations(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "less than a minute"),
        (59, "less than a minute"),
        (60, "1 minute"),
        (150, "2 minutes"),
        (3600, "1 hour"),
        (3 * 86_400 + 5, "3 days"),
        (14 * 86_400, "2 weeks"),
        (400 * 86_400, "1 year"),
    ],
)
def test_spans(seconds, text):
    assert format_span(seconds) == text


def test_relative_times_past_and_future():
    assert relative_time(NOW - timedelta(days=3, hours=2), NOW) == "3 days ago"
    assert relative_time(NOW + timedelta(minutes=4, seconds=30), NOW) == "in 4 minutes"
    assert relative_time(NOW - timedelta(seconds=5), NOW) == "less than a minute ago"
    assert relative_time((NOW - timedelta(hours=1)).isoformat(), NOW) == "1 hour ago"
    assert relative_time("2026-05-01T11:00:00", NOW) == "1 hour ago"  # naive: UTC
    assert relative_time("2026-05-01T13:00:00+02:00", NOW) == "1 hour ago"  # 11:00 UTC


def test_a_time_far_ahead_is_never():
    """Ollama writes keep_alive -1 as an expiry centuries ahead."""
    assert relative_time("2318-01-01T00:00:00Z", NOW) == "never"
    assert relative_time(NOW + timedelta(days=365 * 9), NOW) == "in 9 years"


@pytest.mark.parametrize("bad", ["", "yesterday", "2026-13-45T00:00:00", None])
def test_what_is_not_a_time_is_missing(bad):
    assert relative_time(bad, NOW) == MISSING
    if bad is not None:
        assert seconds_from_now(bad, NOW) is None


def test_seconds_from_now_defaults_to_the_clock():
    ahead = seconds_from_now(datetime.now(UTC) + timedelta(minutes=10))
    assert ahead is not None and 590 < ahead <= 600
