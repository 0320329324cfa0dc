"""This test process's children, found by a marker in their command line."""

from __future__ import annotations

import psutil


def children_running(marker: str) -> list[psutil.Process]:
    """Children (recursive) whose command line holds ``marker``; zombies and vanished ones are skipped."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if marker in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found
