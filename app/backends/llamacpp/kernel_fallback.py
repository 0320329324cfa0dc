"""When llama.cpp's CPU-specific kernels crash the worker, run without them from then on.

Some virtual machines list AMX in /proc/cpuinfo and grant its permission, yet llama.cpp's AMX matrix kernels then
die with SIGILL (measured here: a Q4_K model, the starter, on the first reply), and on others with SIGSEGV (measured
2026-12-07 on a Sapphire Rapids VM: the starter model, raw llama-cpp-python 0.3.36, any prompt; without the extra
buffer types it runs). A SIGSEGV counts as the kernels' only where llama.cpp uses AMX on this machine; elsewhere it
is reported as any other death. The worker is then restarted with
llama.cpp's extra buffer types off (``LLMW_LLAMA_NO_REPACK=1``: no AMX, no repacked layouts — slower where they
work, but it runs), and a marker file remembers it for this machine, so the next start never crashes first.
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path

from app.backends.llamacpp.cpu_features import llama_cpp_uses_amx
from app.backends.llamacpp.repack import NO_REPACK_ENV, repacking_disabled

log = logging.getLogger("app.backends.llamacpp")

NOTE = (
    "llama.cpp's CPU-specific kernels (AMX or repacked weights) crashed on this machine, so models now load "
    "without them: slower, but stable."
)


class KernelFallback:
    """``marker``: the file that remembers the fallback for this machine (None: remember it for this run only)."""

    def __init__(self, marker: Path | None = None, uses_amx: bool | None = None) -> None:
        """``uses_amx``: whether llama.cpp's AMX kernels run here (None: read from this machine)."""
        self.marker = marker
        self.active = repacking_disabled() or (marker is not None and marker.exists())
        self._uses_amx = uses_amx

    def worker_env(self) -> dict[str, str]:
        """What a new worker's environment needs: the switch, once the fallback is on."""
        return {NO_REPACK_ENV: "1"} if self.active else {}

    def crashed(self, returncode: int | None) -> bool:
        """The worker exited with ``returncode``: True when that was the kernels' death (see the module) and the
        fallback has just been switched on (the caller restarts the worker and tries once more)."""
        if self.active or (signal_name := self._kernel_signal(returncode)) is None:
            return False
        self.active = True
        log.warning("%s (the worker was killed by %s)", NOTE, signal_name)
        if self.marker is not None:
            try:
                self.marker.parent.mkdir(parents=True, exist_ok=True)
                self.marker.write_text(
                    f"{signal_name} in llama.cpp's CPU kernels; loading without extra buffer types\n"
                )
            except OSError as exc:  # remembered for this run all the same
                log.warning("cannot remember the llama.cpp kernel fallback in %s: %s", self.marker, exc)
        return True

    def _kernel_signal(self, returncode: int | None) -> str | None:
        """The signal's name when a worker killed by it died in the kernels this fallback turns off."""
        if returncode == -signal.SIGILL:
            return "SIGILL"
        if returncode == -signal.SIGSEGV and (self._uses_amx if self._uses_amx is not None else llama_cpp_uses_amx()):
            return "SIGSEGV"
        return None
