"""When llama.cpp's CPU-specific kernels crash the worker, run without them from then on.

Some virtual machines list AMX in /proc/cpuinfo and grant its permission, yet llama.cpp's AMX matrix kernels then
die with SIGILL (measured here: a Q4_K model, the starter, on the first reply). The worker is then restarted with
llama.cpp's extra buffer types off (``LLMW_LLAMA_NO_REPACK=1``: no AMX, no repacked layouts — slower where they
work, but it runs), and a marker file remembers it for this machine, so the next start never crashes first.
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path

from app.backends.llamacpp.repack import NO_REPACK_ENV, repacking_disabled

log = logging.getLogger("app.backends.llamacpp")

NOTE = (
    "llama.cpp's CPU-specific kernels (AMX or repacked weights) crashed on this machine, so models now load "
    "without them: slower, but stable."
)


class KernelFallback:
    """``marker``: the file that remembers the fallback for this machine (None: remember it for this run only)."""

    def __init__(self, marker: Path | None = None) -> None:
        self.marker = marker
        self.active = repacking_disabled() or (marker is not None and marker.exists())

    def worker_env(self) -> dict[str, str]:
        """What a new worker's environment needs: the switch, once the fallback is on."""
        return {NO_REPACK_ENV: "1"} if self.active else {}

    def crashed(self, returncode: int | None) -> bool:
        """The worker exited with ``returncode``: True when that was an illegal instruction and the fallback has
        just been switched on (the caller restarts the worker and tries once more)."""
        if self.active or returncode != -signal.SIGILL:
            return False
        self.active = True
        log.warning("%s (the worker was killed by SIGILL)", NOTE)
        if self.marker is not None:
            try:
                self.marker.parent.mkdir(parents=True, exist_ok=True)
                self.marker.write_text("SIGILL in llama.cpp's CPU kernels; loading without extra buffer types\n")
            except OSError as exc:  # remembered for this run all the same
                log.warning("cannot remember the llama.cpp kernel fallback in %s: %s", self.marker, exc)
        return True
