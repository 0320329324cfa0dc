from __future__ import annotations

from dataclasses import replace

import pytest

from app.core.gguf.header import read_gguf_header
from app.core.memory.estimate import EstimateSettings, estimate_memory
from app.core.memory.fit import FITS, TIGHT, WONT_FIT, MachineMemory, fit_verdict, largest_fitting_ctx
from tests.support.gguf_factory import write_shaped_gguf

GIB = 1 << 30
SHAPE = {"architecture": "llama", "n_layer": 8, "n_embd": 512, "n_head": 8, "n_head_kv": 8, "n_ff": 1024}


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    return read_gguf_header(write_shaped_gguf(tmp_path_factory.mktemp("fits") / "m.gguf", **SHAPE))


def cpu_machine(ram_available: int) -> MachineMemory:
    return MachineMemory((), (), (), 64 * GIB, ram_available, "No NVIDIA GPU found.")


def gpu_machine(vram_free: int, ram_available: int = 64 * GIB) -> MachineMemory:
    return MachineMemory(("Fake GPU",), (vram_free,), (vram_free,), 64 * GIB, ram_available, None)


def test_three_states_on_system_ram(header):
    settings = EstimateSettings(n_ctx=8192)
    needed = estimate_memory(header, settings).total_bytes
    assert fit_verdict(header, settings, cpu_machine(needed * 2)).state == FITS
    tight = fit_verdict(header, settings, cpu_machine(int(needed * 1.05)))
    assert tight.state == TIGHT and tight.needed_bytes == needed and "Tight fit" in tight.summary
    wont = fit_verdict(header, settings, cpu_machine(needed // 2))
    assert wont.state == WONT_FIT and "system RAM" in wont.summary


def test_lower_context_suggestion_is_computed(header):
    settings = EstimateSettings(n_ctx=16384)
    room = estimate_memory(header, EstimateSettings(n_ctx=4096)).total_bytes
    machine = cpu_machine(int(room / 0.9) + 1)
    verdict = fit_verdict(header, settings, machine)
    assert verdict.state == WONT_FIT
    ctx = largest_fitting_ctx(header, settings, machine)
    assert ctx is not None and ctx >= 4096 and ctx % 256 == 0
    assert fit_verdict(header, EstimateSettings(n_ctx=ctx), machine).state == FITS
    assert fit_verdict(header, EstimateSettings(n_ctx=ctx + 256), machine).state != FITS
    assert f"Lower the context to {ctx:,} tokens" in verdict.suggestions[0]


def test_q8_kv_suggestion(header):
    settings = EstimateSettings(n_ctx=32768, flash_attn=True)
    q8 = estimate_memory(header, EstimateSettings(n_ctx=32768, flash_attn=True, type_k="q8_0", type_v="q8_0"))
    verdict = fit_verdict(header, settings, cpu_machine(int(q8.total_bytes / 0.85)))
    assert verdict.state != FITS
    assert any("q8_0 KV cache" in s for s in verdict.suggestions)


def test_offload_fewer_layers_suggestion(header):
    settings = EstimateSettings(n_ctx=4096, n_gpu_layers=-1)
    full = estimate_memory(header, settings)
    verdict = fit_verdict(header, settings, gpu_machine(full.gpu_bytes // 2))
    assert verdict.state == WONT_FIT and "free VRAM" in verdict.summary
    offload = next(s for s in verdict.suggestions if s.startswith("Offload"))
    layers = int(offload.split()[1])
    assert 0 < layers < 9
    fitting = EstimateSettings(n_ctx=4096, n_gpu_layers=layers)
    assert fit_verdict(header, fitting, gpu_machine(full.gpu_bytes // 2)).state == FITS


def test_nothing_fits(header):
    verdict = fit_verdict(header, EstimateSettings(), cpu_machine(1 << 20))
    assert verdict.state == WONT_FIT
    assert verdict.suggestions == ("No setting makes it fit here: choose a smaller quantization or a smaller model.",)


def test_no_gpu_judges_the_whole_load_against_ram(header):
    offload = EstimateSettings(n_ctx=4096, n_gpu_layers=-1)
    on_cpu = estimate_memory(header, EstimateSettings(n_ctx=4096, n_gpu_layers=0))
    assert estimate_memory(header, offload).gpu_bytes > 0
    verdict = fit_verdict(header, offload, cpu_machine(on_cpu.total_bytes * 4))
    assert verdict.state == FITS and verdict.needed_bytes == on_cpu.host_bytes
    assert verdict.summary.endswith("system RAM (no GPU here: everything runs from RAM).")
    assert "VRAM" not in verdict.summary and verdict.suggestions == ()
    short = fit_verdict(header, EstimateSettings(n_ctx=16384, n_gpu_layers=12), cpu_machine(on_cpu.total_bytes))
    assert short.state == WONT_FIT and "system RAM (no GPU here" in short.summary
    assert short.suggestions[0].startswith("Lower the context to ")  # found on the CPU, not "nothing fits"
    assert not any(s.startswith("Offload") for s in short.suggestions)


def test_the_machine_decides_whether_llama_cpp_s_amx_copies_count(header):
    """On a CPU with Intel AMX llama.cpp keeps an AMX copy of the f16 layer matrices: the verdict counts it."""
    settings = EstimateSettings(n_ctx=4096)
    plain = estimate_memory(header, settings)
    amx = estimate_memory(header, replace(settings, cpu_amx=True))
    assert amx.weights_amx_bytes > 0 and amx.host_bytes == plain.host_bytes + amx.weights_amx_bytes
    amx_cpu = replace(cpu_machine(amx.host_bytes - 1), cpu_amx=True)
    verdict = fit_verdict(header, settings, amx_cpu)
    assert verdict.state == WONT_FIT and verdict.needed_bytes == amx.host_bytes
    assert largest_fitting_ctx(header, settings, amx_cpu) < 4096  # the search counts the copies too
    other_cpu = cpu_machine(amx.host_bytes - 1)  # the same RAM without AMX: the settings' own flag is overruled
    assert fit_verdict(header, replace(settings, cpu_amx=True), other_cpu).needed_bytes == plain.host_bytes
    assert fit_verdict(header, settings, other_cpu).state != WONT_FIT
