"""``llm-workstation --screenshot FILE --size --page --palette``: the page at that size, an unknown page exits 2."""

from __future__ import annotations

import subprocess
import sys

import pytest
from PySide6.QtGui import QImage


def _shot(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app", "--screenshot", str(tmp_path / "shot.png"), *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(("page", "size", "palette"), [("models/discover", "1024x700", "dark"), ("chat", "", "light")])
def test_a_page_is_rendered_at_the_size_asked(tmp_path, page, size, palette):
    done = _shot(tmp_path, "--page", page, "--palette", palette, *(["--size", size] if size else []))
    assert done.returncode == 0, done.stderr[-2000:]
    image = QImage(str(tmp_path / "shot.png"))
    assert (image.width(), image.height()) == ((1024, 700) if size else (1366, 768))


@pytest.mark.parametrize(("args", "says"), [(("--page", "nowhere"), "unknown page"), (("--size", "big"), "WIDTHx")])
def test_bad_options_exit_2_before_qt_starts(tmp_path, args, says):
    done = _shot(tmp_path, *args)
    assert done.returncode == 2 and says in done.stderr
    assert not (tmp_path / "shot.png").exists()
