"""The engines ``bench run`` drives, one small driver each, all with the same face (``BenchDriver``).

* **llama.cpp**: the app's worker process (``LlamaCppBackend``). The worker runs ONE sequence, so at
  concurrency N the N clients wait in line for it: the rows show that queue honestly (TTFT and latency include
  the wait, throughput stays that of one stream, ``parallel_streams`` is 1).
* **llama.cpp parallel** (``BenchTarget.parallel``, row engine ``llamacpp-parallel``): the app's parallel engine
  (``app.backends.llamacpp.parallel_chats``, the one ``serve --parallel N`` runs), restarted with N sequences of
  ``n_ctx`` tokens each for each concurrency N; all active sequences decode in one batch per step. Chats through
  the model's template, like the llama.cpp row, so the two compare.
* **vLLM**: any OpenAI-compatible vLLM server (app-managed or ``--endpoint``), through the app's streaming client
  (``app.backends.openai_stream``) with ``include_usage`` for exact token counts and ``ignore_eos`` so each
  reply is ``max_tokens`` long; ``/metrics`` gives KV usage, running requests and preemptions.
* **Ollama**: a running Ollama server; one ``OllamaBackend`` per client (each streams one reply at a time), all
  created and loaded by ``prepare`` before the measured set, so no request's clock includes a client's set-up.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from app.backends.http_json import response_json
from app.backends.llamacpp.repack import NO_REPACK_ENV
from app.backends.protocol import BackendError, GenerationError
from app.core.bench.stats import RequestSample
from app.core.errors import AppError, ErrorKind
from app.core.params import LoadParams, SamplingParams
from app.core.vllm.metrics import VllmMetrics
from app.services.vllm.metrics import MetricsUnavailableError, read_metrics


class BenchRunError(AppError):
    """The bench cannot run at all (bad model, server gone); the message says what to do next. The kind is per
    instance: bad settings are invalid input, a server that cannot be reached is unavailable."""

    kind = ErrorKind.INVALID_INPUT

    @classmethod
    def of(cls, exc: AppError, prefix: str = "") -> BenchRunError:
        """An engine's error as a BenchRunError of the same kind and setting."""
        return cls(f"{prefix}{exc}", kind=exc.kind, setting=exc.setting)


@dataclass(frozen=True)
class BenchTarget:
    """What to measure. ``model``: a GGUF path (llama.cpp), a served model name (vLLM; empty: the first one the
    server lists) or an Ollama model name. ``server_pid``: the vLLM server's PID when the app started it."""

    backend: str
    model: str
    endpoint: str | None = None
    api_key: str | None = None
    n_ctx: int = 4096
    server_pid: int | None = None
    vllm_python: str | None = None
    parallel: bool = False  # llama.cpp only: N parallel sequences at concurrency N

    def to_dict(self) -> dict[str, Any]:
        """What a saved run records (the API key never)."""
        return {"backend": self.backend, "model": self.model, "endpoint": self.endpoint, "n_ctx": self.n_ctx,
                "parallel": self.parallel}  # fmt: skip


def _messages(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


def _sampling(max_tokens: int, seed: int, temperature: float) -> SamplingParams:
    return SamplingParams(temperature=temperature, top_p=1.0, top_k=0, min_p=0.0, repeat_penalty=1.0,
                          max_tokens=max_tokens, seed=seed)  # fmt: skip


class BenchDriver(Protocol):
    name: str
    parallel_streams: int | None  # the most replies the engine generates at once, when fixed (llama.cpp: 1)
    note: str

    async def open(self) -> str:
        """Connect / load; returns the model's name. Raises BenchRunError."""
        ...

    async def prepare(self, clients: int) -> None:
        """Set up ``clients`` concurrent clients before the measured set starts. Raises BenchRunError."""
        ...

    async def one(self, prompt: str, seed: int, max_tokens: int, temperature: float) -> RequestSample: ...

    def pid(self) -> int | None:
        """The engine process whose tree's memory counts, if it runs on this machine."""
        ...

    async def metrics(self) -> VllmMetrics | None: ...

    def take_peak_kv(self) -> float | None:
        """The highest KV usage (0–1) the driver itself saw since the last call; resets it."""
        ...

    async def close(self) -> None: ...


class LlamaCppDriver:
    name = "llamacpp"
    parallel_streams: int | None = 1
    note = "one stream: the worker runs one sequence, other clients wait in line (included in TTFT/latency)"

    def __init__(self, target: BenchTarget) -> None:
        from app.backends.llamacpp.backend import LlamaCppBackend

        self.target = target
        self.backend = LlamaCppBackend()
        self._turn = asyncio.Lock()
        self._peak_kv: float | None = None

    async def open(self) -> str:
        try:
            info = await self.backend.load(self.target.model, LoadParams(n_ctx=self.target.n_ctx))
        except BackendError as exc:
            raise BenchRunError.of(exc) from None
        return info.name

    def pid(self) -> int | None:
        return self.backend.worker_pid

    async def prepare(self, clients: int) -> None:
        return None  # the clients share the one worker

    async def one(self, prompt: str, seed: int, max_tokens: int, temperature: float) -> RequestSample:
        sent = time.perf_counter()
        first: float | None = None
        async with self._turn:
            try:
                async for delta in self.backend.stream_chat(
                    _messages(prompt), _sampling(max_tokens, seed, temperature)
                ):
                    first = first or (time.perf_counter() if delta.text else None)
            except BackendError as exc:
                return RequestSample(False, latency_ms=(time.perf_counter() - sent) * 1000, error=str(exc))
            stats = self.backend.stats()
            kv = self.backend.kv_usage()
        if kv is not None:
            self._peak_kv = max(self._peak_kv or 0.0, kv.fraction)
        now = time.perf_counter()
        tokens = stats.completion_tokens if stats else 0
        ttft = (first - sent) * 1000 if first else None
        return RequestSample(True, tokens, ttft, (now - sent) * 1000)

    async def metrics(self) -> VllmMetrics | None:
        return None

    def take_peak_kv(self) -> float | None:
        peak, self._peak_kv = self._peak_kv, None
        return peak

    async def close(self) -> None:
        await self.backend.close()


class LlamaCppParallelDriver:
    name = "llamacpp-parallel"
    note_always = True  # the note holds at concurrency 1 too
    note = "N sequences at once by continuous batching (the API server's parallel engine), full context each"

    def __init__(self, target: BenchTarget) -> None:
        from app.backends.llamacpp.parallel_chats import ParallelChats

        self.target = target
        self.engine = ParallelChats()
        self.parallel_streams: int | None = 1
        self._slots = 0
        self._no_repack = os.environ.get(NO_REPACK_ENV) == "1"

    async def open(self) -> str:
        await self._start(1)
        return str(self.engine.info.get("name") or Path(self.target.model).stem)

    async def _start(self, slots: int) -> None:
        """The parallel child with ``slots`` sequences (started again without llama.cpp's CPU-specific kernels if
        it crashes starting with them, as the app's engine host does)."""
        from app.backends.llamacpp.parallel_chats import ParallelEngineError

        params = LoadParams(n_ctx=self.target.n_ctx)
        try:
            try:
                await self.engine.start(self.target.model, params, slots, -1, no_repack=self._no_repack)
            except ParallelEngineError as exc:
                if self._no_repack or not exc.crashed:
                    raise
                self._no_repack = True
                await self.engine.start(self.target.model, params, slots, -1, no_repack=True)
        except ParallelEngineError as exc:
            raise BenchRunError.of(exc, f"llama.cpp could not run {slots} parallel sequences: ") from None
        self._slots = self.parallel_streams = slots

    def pid(self) -> int | None:
        return self.engine.pid

    async def prepare(self, clients: int) -> None:
        """Restart the child with ``clients`` sequences (and warm it with one short request)."""
        if clients != self._slots or self.engine.pid is None:
            await self._start(clients)
            await self.one("warm-up", 0, 2, 0.0)

    async def one(self, prompt: str, seed: int, max_tokens: int, temperature: float) -> RequestSample:
        sent = time.perf_counter()
        first: float | None = None
        reply = self.engine.stream_chat(_messages(prompt), _sampling(max_tokens, seed, temperature))
        try:
            async for delta in reply:
                first = first or (time.perf_counter() if delta.text else None)
        except BackendError as exc:
            return RequestSample(False, latency_ms=(time.perf_counter() - sent) * 1000, error=str(exc))
        finally:
            await reply.aclose()
        tokens = reply.stats.completion_tokens if reply.stats else 0
        ttft = (first - sent) * 1000 if first else None
        return RequestSample(True, tokens, ttft, (time.perf_counter() - sent) * 1000)

    async def metrics(self) -> VllmMetrics | None:
        return None

    def take_peak_kv(self) -> float | None:
        return None

    async def close(self) -> None:
        await self.engine.close()


class VllmDriver:
    name = "vllm"
    parallel_streams: int | None = None
    note = "max sustained: at most the peak requests running in vLLM's /metrics (unknown if it was not read)"

    def __init__(self, target: BenchTarget) -> None:
        from app.backends.openai_stream import openai_client
        from app.backends.vllm import normalize_url

        try:
            self.endpoint = normalize_url(target.endpoint)
        except BackendError as exc:
            raise BenchRunError.of(exc) from None
        self.target = target
        self.client = openai_client(self.endpoint, target.api_key)
        self.model = target.model
        self._pid = target.server_pid

    async def open(self) -> str:
        from app.services.bench.memory import pid_listening_on

        served = await self._served_models()
        if not self.model:
            self.model = served[0]
        elif self.model not in served:
            raise BenchRunError(f"the server at {self.endpoint} serves {', '.join(served)}, not {self.model!r}; "
                                "choose one of those", kind=ErrorKind.NOT_FOUND, setting="model")  # fmt: skip
        if self._pid is None:
            self._pid = await asyncio.to_thread(pid_listening_on, self.endpoint)
        return self.model

    async def _served_models(self) -> list[str]:
        try:
            response = await self.client.get("/v1/models", timeout=httpx.Timeout(30.0, connect=10.0))
        except httpx.HTTPError as exc:
            raise BenchRunError(f"cannot reach vLLM at {self.endpoint} ({type(exc).__name__}); start it or check "
                                "the address", kind=ErrorKind.UNAVAILABLE, setting="endpoint") from None  # fmt: skip
        if response.status_code in (401, 403):
            raise BenchRunError(f"vLLM at {self.endpoint} refused the API key (HTTP {response.status_code}); "
                                "check the API key", kind=ErrorKind.UNAVAILABLE, setting="api_key")  # fmt: skip
        try:
            models = [str(entry["id"]) for entry in response_json(response, what="/v1/models")["data"]]
        except (ValueError, KeyError, TypeError):  # ValueError: JsonError (not JSON, nested, too large)
            models = []
        if response.status_code != 200 or not models:
            raise BenchRunError(f"{self.endpoint}/v1/models lists no model (HTTP {response.status_code}); "
                                "is this a vLLM server?", kind=ErrorKind.UNAVAILABLE, setting="endpoint")  # fmt: skip
        return models

    def pid(self) -> int | None:
        return self._pid

    async def prepare(self, clients: int) -> None:
        return None  # the clients share one HTTP client (a connection pool)

    async def one(self, prompt: str, seed: int, max_tokens: int, temperature: float) -> RequestSample:
        from app.backends.openai_stream import ChatStream, request_body, run_reply

        body = request_body(self.model, _messages(prompt), _sampling(max_tokens, seed, temperature))
        body["ignore_eos"] = True  # vLLM's extension: every reply is max_tokens long

        def failure(exc: BaseException, partial: str) -> Exception:
            return GenerationError(f"vLLM request failed: {type(exc).__name__}: {exc}", partial)

        stream = ChatStream(lambda s: run_reply(s, body, client=lambda: self.client, failure=failure))
        sent = time.perf_counter()
        try:
            async for _delta in stream:
                pass
        except GenerationError as exc:
            return RequestSample(False, latency_ms=(time.perf_counter() - sent) * 1000, error=str(exc))
        stats = stream.stats
        if stats is None:
            return RequestSample(False, error="the reply ended without figures")
        return RequestSample(True, stats.completion_tokens, stats.ttft_ms, stats.total_ms)

    async def metrics(self) -> VllmMetrics | None:
        try:
            return await read_metrics(self.endpoint, client=self.client, timeout_s=5.0)
        except MetricsUnavailableError:
            return None

    def take_peak_kv(self) -> float | None:
        return None

    async def close(self) -> None:
        await self.client.aclose()


class OllamaDriver:
    name = "ollama"
    parallel_streams: int | None = None
    note = ("max sustained unknown: Ollama runs OLLAMA_NUM_PARALLEL replies at once and queues the rest, "
            "and its API does not say how many")  # fmt: skip

    def __init__(self, target: BenchTarget) -> None:
        self.target = target
        self._idle: list[Any] = []
        self._all: list[Any] = []
        self._pid: int | None = None
        self._host = ""

    async def _backend(self) -> Any:
        return self._idle.pop() if self._idle else await self._new_backend()

    async def _new_backend(self) -> Any:
        from app.backends.factory import create_backend

        backend = create_backend("ollama", host=self.target.endpoint or None)
        self._all.append(backend)
        await backend.load(self.target.model, LoadParams(n_ctx=self.target.n_ctx))
        return backend

    async def open(self) -> str:
        from app.services.bench.memory import pid_listening_on

        try:
            backend = await self._backend()
        except BackendError as exc:
            raise BenchRunError.of(exc) from None
        self._host = backend.host
        self._idle.append(backend)
        self._pid = await asyncio.to_thread(pid_listening_on, self._host)
        return self.target.model

    def pid(self) -> int | None:
        return self._pid

    async def prepare(self, clients: int) -> None:
        """Create and load ``clients`` backends now, so no measured request pays for one's set-up."""
        try:
            while len(self._all) < clients:
                self._idle.append(await self._new_backend())
        except BackendError as exc:
            raise BenchRunError.of(exc, f"cannot set up {clients} Ollama clients: ") from None

    async def one(self, prompt: str, seed: int, max_tokens: int, temperature: float) -> RequestSample:
        try:
            backend = await self._backend()  # prepared before the measured set: taken at once
        except BackendError as exc:
            return RequestSample(False, error=str(exc))
        sent = time.perf_counter()
        try:
            async for _delta in backend.stream_chat(_messages(prompt), _sampling(max_tokens, seed, temperature)):
                pass
        except BackendError as exc:
            return RequestSample(False, latency_ms=(time.perf_counter() - sent) * 1000, error=str(exc))
        finally:
            self._idle.append(backend)
        stats = backend.stats()
        if stats is None:
            return RequestSample(False, error="the reply ended without figures")
        ttft = stats.ttft_ms
        return RequestSample(True, stats.completion_tokens, ttft, (time.perf_counter() - sent) * 1000)

    async def metrics(self) -> VllmMetrics | None:
        return None

    def take_peak_kv(self) -> float | None:
        return None

    async def close(self) -> None:
        for backend in self._all:
            await backend.close()


def make_driver(target: BenchTarget) -> BenchDriver:
    if target.backend == "llamacpp":
        return LlamaCppParallelDriver(target) if target.parallel else LlamaCppDriver(target)
    if target.backend == "vllm":
        return VllmDriver(target)
    if target.backend == "ollama":
        return OllamaDriver(target)
    raise BenchRunError(f"unknown engine {target.backend!r}; choose llamacpp, vllm or ollama", setting="backend")
