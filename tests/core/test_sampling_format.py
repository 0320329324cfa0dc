"""Sampling figures are written one way on every page (Settings, the chat drawer, Modelfiles): ``0.95``."""

from __future__ import annotations

import pytest

from app.core.units import MISSING, format_sampling_value


@pytest.mark.parametrize(
    ("value", "decimals", "text"),
    [
        (0.95, 3, "0.95"),  # not 0.950
        (0.950, 2, "0.95"),
        (1.0, 3, "1.0"),  # a float keeps one decimal
        (0.0, 3, "0.0"),
        (0.05, 3, "0.05"),
        (1.1, 3, "1.1"),
        (0.123456, 3, "0.123"),
        (0.123456, 4, "0.1235"),
        (0.9999, 3, "1.0"),
        (-0.5, 3, "-0.5"),
        (-0.0001, 3, "0.0"),  # no "-0.0"
        (10000.0, 3, "10000.0"),
        (0.7, 0, "0.7"),  # at least one decimal whatever is asked
        (None, 3, MISSING),
    ],
)
def test_format_sampling_value(value, decimals, text):
    assert format_sampling_value(value, decimals) == text
