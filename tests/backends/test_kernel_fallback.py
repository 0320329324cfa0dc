"""llama.cpp's CPU-specific kernels crashing the worker (SIGILL, as AMX does on some VMs): the worker restarts
without them, the model is loaded again, the reply in flight is asked again, and the machine remembers it."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from app.backends.llamacpp.backend import LlamaCppBackend
from app.backends.llamacpp.kernel_fallback import KernelFallback
from app.backends.llamacpp.repack import NO_REPACK_ENV
from app.backends.protocol import StateKind
from app.core.params import LoadParams, SamplingParams
from app.services.engines.entries import EngineKind
from app.services.engines.events import ModelUnloaded
from app.services.engines.host import EngineHost

USER = [{"role": "user", "content": "hello there " * 500}]  # a long prompt: the first token takes a while


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").partition("=")[::2] for item in raw if b"=" in item)


async def _until(predicate, timeout=60.0):
    for _ in range(int(timeout / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_a_sigill_switches_the_kernels_off_and_is_remembered(tmp_path, monkeypatch, long_context_gguf):
    monkeypatch.delenv(NO_REPACK_ENV, raising=False)
    marker = tmp_path / "cache" / "llama-kernel-fallback"

    async def scenario():
        backend = LlamaCppBackend(kernel_fallback_marker=marker)
        host, events = EngineHost(backend), []
        host.subscribe(events.append)
        try:
            await host.load(str(long_context_gguf), LoadParams(n_ctx=2048))
            first_pid = backend.worker_pid
            assert NO_REPACK_ENV not in _environ(first_pid)
            reply = host.stream_chat(EngineKind.LLAMACPP, USER, SamplingParams(max_tokens=8, temperature=0.0))
            consuming = asyncio.ensure_future(reply.__anext__())
            await _until(lambda: backend.generating)
            os.kill(first_pid, signal.SIGILL)  # as llama.cpp's AMX kernels die on such a VM
            first = await consuming  # asked again in the new worker: the client sees a reply, not an error
            rest = "".join([d.text async for d in reply])
            assert (first.text + rest) and reply.stats.finish_reason in ("length", "stop")
            assert marker.exists() and backend.kernel_fallback.active
            assert backend.worker_pid not in (None, first_pid) and _environ(backend.worker_pid)[NO_REPACK_ENV] == "1"
            assert backend.state.kind is StateKind.READY and host.loaded(EngineKind.LLAMACPP) is not None
            assert not any(isinstance(e, ModelUnloaded) for e in events)  # clients never saw the model go
        finally:
            await host.close()
        assert KernelFallback(marker).active  # the next start loads without the kernels from the first load

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_other_deaths_are_reported_as_before(tmp_path, monkeypatch, tiny_gguf):
    monkeypatch.delenv(NO_REPACK_ENV, raising=False)
    marker = tmp_path / "llama-kernel-fallback"

    async def scenario():
        backend = LlamaCppBackend(kernel_fallback_marker=marker)
        try:
            await backend.load(str(tiny_gguf), LoadParams(n_ctx=512))
            backend.kill_worker()  # SIGKILL: not the kernels
            await _until(lambda: backend.state.kind is StateKind.FAILED)
            assert backend.model is None and not marker.exists() and not backend.kernel_fallback.active
        finally:
            await backend.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_sigsegv_counts_as_the_kernels_only_where_llama_cpp_uses_amx(tmp_path, monkeypatch):
    """Seen on a Sapphire Rapids VM: the AMX kernels die with SIGSEGV on any prompt of the starter model."""
    monkeypatch.delenv(NO_REPACK_ENV, raising=False)
    with_amx = KernelFallback(tmp_path / "amx" / "marker", uses_amx=True)
    assert with_amx.crashed(-signal.SIGSEGV) and with_amx.active
    assert "SIGSEGV" in (tmp_path / "amx" / "marker").read_text()
    assert not with_amx.crashed(-signal.SIGSEGV)  # once on, a second death is reported as any other

    without_amx = KernelFallback(tmp_path / "plain" / "marker", uses_amx=False)
    assert not without_amx.crashed(-signal.SIGSEGV) and not without_amx.active
    assert not (tmp_path / "plain" / "marker").exists()
    assert not without_amx.crashed(-signal.SIGKILL) and without_amx.crashed(-signal.SIGILL)
