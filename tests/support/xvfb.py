"""A private X server (Xvfb) for checks that need a real window: ``with xvfb_display() as display:`` gives its
name (``":5"``); a test calls ``require_xvfb()`` first, which skips it with a reason where Xvfb is missing."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest


def require_xvfb() -> str:
    """The Xvfb program, or skip the test."""
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        pytest.skip("needs Xvfb for a real X window (Debian: apt-get install xvfb)")
    return xvfb


@contextlib.contextmanager
def xvfb_display(screen: str = "1366x768x24") -> Iterator[str]:
    """Start Xvfb on a free display (it picks the number and writes it once it accepts clients); stop it after."""
    xvfb = require_xvfb()
    read_fd, write_fd = os.pipe()
    server = subprocess.Popen(
        [xvfb, "-displayfd", str(write_fd), "-screen", "0", screen, "-nolisten", "tcp"],
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    try:
        with os.fdopen(read_fd) as ready:
            number = ready.readline().strip()
        if not number:
            pytest.fail("Xvfb exited before it accepted clients", pytrace=False)
        yield f":{number}"
    finally:
        server.terminate()
        server.wait(10)
