"""Start, watch and stop one local vLLM OpenAI-compatible server.

The server runs in its own session (process group) so that stopping it reaches the API server, its EngineCore
and the workers at once. vLLM can leave a ``VLLM::Worker`` behind when the engine core dies (seen with 0.32:
orphaned, still in the session), so :meth:`VllmServer.stop` also kills every process left in the session.

Output is read on two threads and delivered to the asyncio loop line by line. The server binds its port before
the engine loads but only listens when ready, so readiness is ``GET /health`` answering 200; a refused
connection means "still loading". After start-up a monitor notices the process exiting, or an engine process
dying (the API server then exits by itself a few seconds later, with code 0), and reports a
:class:`VllmServerError` with the classified cause and the last log lines.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING

import psutil

from app.core.errors import AppError, ErrorKind
from app.core.lazy_import import lazy_import
from app.core.vllm.log import CrashCause, CrashDiagnosis, Phase, PhaseEvent, StartupFacts, StartupTracker
from app.core.vllm.log import classify_crash as classify_log
from app.core.vllm.options import (
    SECRET_MASK,
    VllmServerOptions,
    docker_command,
    serve_argv,
    serve_env,
    shell_command,
    validate,
)
from app.services.vllm.environment import (
    VllmInstall,
    alive_processes,
    has_nvidia_gpu,
    is_engine_process,
    terminate_session,
)

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_import("httpx")  # ~100 ms: loaded when first used


log = logging.getLogger("app.services.vllm_server")
output_log = logging.getLogger("app.services.vllm_server.output")

__all__ = ["VllmServer", "VllmServerError", "default_cpu_kv_cache_gib", "free_port"]

LogCallback = Callable[[str], None]
PhaseCallback = Callable[[PhaseEvent], None]
CrashCallback = Callable[["VllmServerError"], None]

HEALTH_POLL_S = 0.5
MONITOR_POLL_S = 1.0
SELF_EXIT_GRACE_S = 8.0  # after an engine process dies, the API server exits by itself within ~4 s
TAIL_LINES = 400
KV_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"


class VllmServerError(AppError):
    """The server could not start or stopped on its own. ``str()`` is the user message. Kind: engine failed,
    busy (already running), invalid input (options vLLM would refuse) or unavailable (the port is taken)."""

    def __init__(
        self,
        message: str,
        *,
        diagnosis: CrashDiagnosis | None = None,
        log_tail: list[str] | None = None,
        exit_code: int | None = None,
        kind: ErrorKind | None = None,
        setting: str | None = None,
    ) -> None:
        super().__init__(message, kind=kind, setting=setting)
        self.diagnosis = diagnosis
        self.log_tail = log_tail or []
        self.exit_code = exit_code

    @property
    def cause(self) -> CrashCause | None:
        return self.diagnosis.cause if self.diagnosis else None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no obstacle
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def default_cpu_kv_cache_gib(total_memory_bytes: int) -> int:
    """KV-cache GiB for the CPU backend: an eighth of RAM, 1–8 GiB (vLLM's own default takes most of RAM)."""
    return max(1, min(8, total_memory_bytes // (8 * 2**30)))


class VllmServer:
    """One vLLM server the app starts. ``python``: the vLLM environment's interpreter."""

    def __init__(
        self,
        python: str | os.PathLike[str],
        options: VllmServerOptions,
        env_overrides: Mapping[str, str] | None = None,
        *,
        use_module: bool = True,
        cpu_build: bool | None = None,
        ready_timeout_s: float = 900.0,
    ) -> None:
        self.python = Path(python)
        self.options = options
        self.env_overrides = dict(env_overrides or {})
        self.use_module = use_module
        self.cpu_build = (not has_nvidia_gpu()) if cpu_build is None else cpu_build
        self.ready_timeout_s = ready_timeout_s
        self.port: int | None = options.port
        self.crash: VllmServerError | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._tracker = StartupTracker()
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._started_at: float | None = None
        self._ready_after_s: float | None = None
        self._exited: asyncio.Event | None = None
        self._exit_code: int | None = None
        self._stopping = False
        self._monitor: asyncio.Task[None] | None = None
        self._known: dict[int, psutil.Process] = {}
        self._on_log: LogCallback | None = None
        self._on_phase: PhaseCallback | None = None
        self._on_crash: CrashCallback | None = None

    # --- what the UI shows ----------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (known once :meth:`start` picked the port)."""
        if self.port is None:
            raise RuntimeError("The vLLM server has no port yet: start it first.")
        host = f"[{self.options.host}]" if ":" in self.options.host else self.options.host
        return f"http://{host}:{self.port}"

    @property
    def served_model_name(self) -> str:
        return self.options.display_name

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def ready(self) -> bool:
        return self._ready_after_s is not None and self.running

    @property
    def phases(self) -> list[PhaseEvent]:
        """Start-up phases seen so far, in the order they were first seen."""
        return list(self._tracker.events)

    @property
    def facts(self) -> StartupFacts:
        """KV-cache tokens, version … as the start-up log stated them."""
        return self._tracker.facts

    @property
    def elapsed(self) -> float | None:
        """Seconds from start to ready; while starting, seconds so far; None before start."""
        if self._ready_after_s is not None:
            return self._ready_after_s
        return None if self._started_at is None else time.monotonic() - self._started_at

    @property
    def log_tail(self) -> list[str]:
        return list(self._tail)

    def _env_extras(self) -> dict[str, str]:
        extras = serve_env(self.options)
        if self.cpu_build and KV_SPACE_ENV not in os.environ and KV_SPACE_ENV not in self.env_overrides:
            extras[KV_SPACE_ENV] = str(default_cpu_kv_cache_gib(psutil.virtual_memory().total))
        return {**extras, **self.env_overrides}

    def argv(self) -> list[str]:
        """The server's argv (with the port :meth:`start` picked)."""
        return serve_argv(self.python, replace(self.options, port=self.port), self.use_module)

    def launch_command(self, *, reveal_secrets: bool = False) -> str:
        """The shell line that starts this server by hand (the API key masked unless asked)."""
        return shell_command(self.argv(), self._env_extras(), reveal_secrets=reveal_secrets)

    def docker_command(self, tag: str = "latest", *, reveal_secrets: bool = False) -> str:
        """The equivalent ``docker run`` line for an NVIDIA machine."""
        return docker_command(replace(self.options, port=self.port), tag=tag, reveal_secrets=reveal_secrets)

    # --- start ----------------------------------------------------------------------------------------------------
    async def start(
        self,
        on_log: LogCallback | None = None,
        on_phase: PhaseCallback | None = None,
        on_crash: CrashCallback | None = None,
    ) -> None:
        """Start the server and return once ``/health`` answers 200. Raises :class:`VllmServerError`.

        ``on_log`` gets each output line, ``on_phase`` each new start-up phase, ``on_crash`` a crash after start-up.
        Cancelling the call stops the server.
        """
        if self.running:
            raise VllmServerError(f"This vLLM server is already running (pid {self.pid}).", kind=ErrorKind.BUSY)
        problems = validate(self.options)
        if problems:
            raise VllmServerError(" ".join(problems), kind=ErrorKind.INVALID_INPUT)
        self._reset(on_log, on_phase, on_crash)
        self._claim_port()
        self._spawn()
        try:
            await self._wait_ready()
        except BaseException:
            await self._stop_tree(timeout=5.0)
            raise
        self._monitor = asyncio.create_task(self._watch())

    def _reset(
        self, on_log: LogCallback | None, on_phase: PhaseCallback | None, on_crash: CrashCallback | None
    ) -> None:
        self._on_log, self._on_phase, self._on_crash = on_log, on_phase, on_crash
        self._tracker = StartupTracker()
        self._tail.clear()
        self._known.clear()
        self.crash, self._exit_code, self._ready_after_s, self._stopping = None, None, None, False
        self._exited = asyncio.Event()

    def _claim_port(self) -> None:
        if self.options.port is None:
            self.port = free_port(self.options.host)
        elif not _port_is_free(self.options.host, self.options.port):
            raise VllmServerError(
                f"Port {self.options.port} is already in use by another program. Leave the port empty to pick a "
                "free one, or stop the other program.",
                diagnosis=CrashDiagnosis(CrashCause.PORT_IN_USE, "The port is already used by another program."),
                kind=ErrorKind.UNAVAILABLE,
                setting="port",
            )
        else:
            self.port = self.options.port

    def _spawn(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("VLLM_API_KEY", None)  # a key from the app's environment would lock the app out
        env.update(self._env_extras())
        log.info("starting vLLM: %s", self.launch_command())
        self._started_at = time.monotonic()
        self._proc = subprocess.Popen(
            self.argv(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        loop = asyncio.get_running_loop()
        readers = [
            threading.Thread(target=self._read, args=(stream, loop), daemon=True, name=f"vllm-{name}")
            for name, stream in (("stdout", self._proc.stdout), ("stderr", self._proc.stderr))
        ]
        for reader in readers:
            reader.start()
        threading.Thread(target=self._wait_exit, args=(self._proc, readers, loop), daemon=True).start()

    def _read(self, stream: IO[bytes], loop: asyncio.AbstractEventLoop) -> None:
        for raw in stream:
            line = raw.decode("utf-8", "replace").rstrip()
            with contextlib.suppress(RuntimeError):  # loop closed: the app is shutting down
                loop.call_soon_threadsafe(self._deliver_line, line, time.monotonic())

    def _wait_exit(
        self, proc: subprocess.Popen[bytes], readers: list[threading.Thread], loop: asyncio.AbstractEventLoop
    ) -> None:
        code = proc.wait()
        deadline = time.monotonic() + 1.5
        for reader in readers:  # an orphaned worker may hold the pipes open: do not wait for it
            reader.join(timeout=max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._deliver_exit, proc, code)

    def _deliver_line(self, line: str, seen_at: float) -> None:
        if self.options.api_key:
            line = line.replace(self.options.api_key, SECRET_MASK)
        self._tail.append(line)
        output_log.debug("%s", line)
        event = self._tracker.feed(line, seen_at - (self._started_at or seen_at))
        if self._on_log:
            self._on_log(line)
        if event and self._on_phase:
            self._on_phase(event)

    def _deliver_exit(self, proc: subprocess.Popen[bytes], code: int) -> None:
        if proc is self._proc and self._exited is not None:
            self._exit_code = code
            self._exited.set()

    async def _wait_ready(self) -> None:
        assert self._exited is not None and self._started_at is not None
        deadline = self._started_at + self.ready_timeout_s
        async with httpx.AsyncClient(trust_env=False, timeout=2.0) as client:
            while not await self._healthy(client):
                if self._exited.is_set():
                    raise self._crash_error("stopped while starting")
                if time.monotonic() > deadline:
                    raise VllmServerError(
                        f"vLLM did not become ready within {self.ready_timeout_s:.0f} s (last phase: "
                        f"{self._tracker.current or 'none'}). See the server log; a first start may need longer.",
                        log_tail=self.log_tail,
                    )
                await asyncio.sleep(HEALTH_POLL_S)
        self._ready_after_s = time.monotonic() - self._started_at
        event = self._tracker.mark(Phase.READY, self._ready_after_s, "GET /health 200")
        if event and self._on_phase:
            self._on_phase(event)
        self._remember_tree()
        log.info("vLLM ready at %s after %.1f s", self.base_url, self._ready_after_s)

    async def _healthy(self, client: httpx.AsyncClient) -> bool:
        if not self.running:
            return False
        try:
            response = await client.get(f"{self.base_url}/health")
        except httpx.HTTPError:
            return False  # refused or timed out: still loading
        return response.status_code == 200

    # --- while running --------------------------------------------------------------------------------------------
    def _remember_tree(self) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self._proc.pid)
            for proc in [root, *root.children(recursive=True)]:
                self._known[proc.pid] = proc

    async def _watch(self) -> None:
        assert self._exited is not None
        engines = [proc for proc in self._known.values() if is_engine_process(proc)]
        while not self._stopping:
            if self._exited.is_set():
                break
            if engines and len(alive_processes(engines)) < len(engines):
                log.warning("a vLLM engine process died; waiting for the API server to exit")
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._exited.wait(), SELF_EXIT_GRACE_S)
                break
            await asyncio.sleep(MONITOR_POLL_S)
        if self._stopping:
            return
        self.crash = self._crash_error("stopped while running")
        log.error("%s", self.crash)
        await self._stop_tree(timeout=5.0)
        if self._on_crash:
            self._on_crash(self.crash)

    def _crash_error(self, when: str) -> VllmServerError:
        tail = self.log_tail
        diagnosis = classify_log(tail, self._exit_code)
        if diagnosis.cause is CrashCause.OTHER and self._exit_code in (0, None):
            diagnosis = classify_log([*tail, "EngineDeadError: the engine process is gone"], self._exit_code)
        said = f" (vLLM said: {diagnosis.evidence[:240]})" if diagnosis.evidence else ""
        return VllmServerError(
            f"vLLM {when}. {diagnosis.message}{said}",
            diagnosis=diagnosis,
            log_tail=tail,
            exit_code=self._exit_code,
        )

    async def wait(self) -> int | None:
        """Wait until the server process ends; raises the crash if it stopped on its own."""
        if self._exited is not None:
            await self._exited.wait()
        if self._monitor is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        if self.crash:
            raise self.crash
        return self._exit_code

    # --- stop -----------------------------------------------------------------------------------------------------
    async def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the process group, SIGKILL after ``timeout`` s, then kill anything left in the session."""
        self._stopping = True
        monitor, self._monitor = self._monitor, None
        if monitor is not None and monitor is not asyncio.current_task():
            monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await monitor
        await self._stop_tree(timeout)

    async def _stop_tree(self, timeout: float) -> None:
        proc = self._proc
        if proc is None:
            return
        self._remember_tree()
        await asyncio.to_thread(terminate_session, proc, list(self._known.values()), timeout)
        if self._exited is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._exited.wait(), 3.0)


def server_for_install(python: str, options: VllmServerOptions, install: VllmInstall | None) -> VllmServer:
    """A server for the app to start (the engine host owns it once started); how to start it (module or script,
    CPU build) as ``install`` was detected."""
    if install is None:
        return VllmServer(python, options)
    return VllmServer(python, options, use_module=install.use_module, cpu_build=install.cpu_build)
