"""The memory estimate and the fits verdict count a vision model's projector: on the GPU when layers are
offloaded (mtmd's ``use_gpu``), in RAM otherwise."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.core.gguf.header import read_gguf_header
from app.core.memory.estimate import EstimateSettings, estimate_memory
from app.core.memory.fit import FITS, WONT_FIT, MachineMemory, fit_verdict
from tests.support.gguf_factory import write_tiny_gguf

MIB = 1 << 20
PROJECTOR = 600 * MIB  # a real Gemma 3 / Qwen2.5-VL F16 mmproj is 0.6–1.3 GB


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    return read_gguf_header(write_tiny_gguf(tmp_path_factory.mktemp("est") / "m.gguf"))


def test_the_projector_adds_its_weights_where_mtmd_puts_them(header):
    plain = EstimateSettings(n_ctx=512, n_gpu_layers=-1)
    base = estimate_memory(header, plain)
    offloaded = estimate_memory(header, replace(plain, projector_bytes=PROJECTOR))
    assert offloaded.total_bytes - base.total_bytes == PROJECTOR
    assert (offloaded.gpu_bytes - base.gpu_bytes, offloaded.host_bytes - base.host_bytes) == (PROJECTOR, 0)
    assert (offloaded.projector_bytes, offloaded.projector_gpu_bytes) == (PROJECTOR, PROJECTOR)
    on_cpu = estimate_memory(header, replace(plain, n_gpu_layers=0, projector_bytes=PROJECTOR))
    cpu_base = estimate_memory(header, replace(plain, n_gpu_layers=0))
    assert (on_cpu.gpu_bytes, on_cpu.host_bytes - cpu_base.host_bytes, on_cpu.projector_gpu_bytes) == (0, PROJECTOR, 0)


def test_the_projector_can_turn_fits_into_wont_fit(header):
    settings = EstimateSettings(n_ctx=512, n_gpu_layers=0)
    needed = estimate_memory(header, settings).total_bytes
    machine = MachineMemory((), (), (), 64 << 30, needed + 200 * MIB, "No NVIDIA GPU found.")
    assert fit_verdict(header, settings, machine).state == FITS
    verdict = fit_verdict(header, replace(settings, projector_bytes=PROJECTOR), machine)
    assert verdict.state == WONT_FIT and verdict.needed_bytes == needed + PROJECTOR
