"""Every page at 1366×768 and 1024×700, light and dark: the real window fits each size (its minimum never forces it
larger) and a screenshot of each is written to build/screenshots/ for a person to look at."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.ui.page_paths import ALIASES, PAGE_PATHS
from tests.support.layout import assert_fits
from tests.support.page_frame import themed

SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
SIZES = ((1366, 768), (1024, 700))
PAGES = [name for name in PAGE_PATHS if name not in ALIASES]


@pytest.mark.parametrize("palette", ["light", "dark"])
def test_every_page_fits_both_sizes_and_is_captured(qloop, make_window, palette):
    SHOTS.mkdir(parents=True, exist_ok=True)

    async def scenario():
        window = await make_window()
        for name in PAGES:
            window.open_path(name)
            for width, height in SIZES:
                window.resize(width, height)
                await asyncio.sleep(0.05)
                assert_fits(window, (width, height))
                assert (window.width(), window.height()) == (width, height), name
                image = window.grab().toImage()
                assert (image.width(), image.height()) == (width, height)
                path = SHOTS / f"{name.replace('/', '-')}_{width}x{height}_{palette}.png"
                assert image.save(str(path)) and path.stat().st_size > 10_000

    with themed(palette):
        qloop.run_until_complete(scenario())
