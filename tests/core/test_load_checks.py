"""Load checks before llama.cpp sees the settings: the memory refusal and the trained-context warning, on a real
GGUF header and machines described by their numbers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.core.gguf.header import read_gguf_header
from app.core.load_checks import context_beyond_training, estimate_settings, memory_refusal
from app.core.memory.estimate import estimate_memory
from app.core.memory.fit import MachineMemory
from app.core.params import LoadParams

GIB = 1 << 30


def cpu_machine(available: int) -> MachineMemory:
    return MachineMemory((), (), (), 2 * available, available, "No NVIDIA GPU found.")


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    from tests.support.gguf_factory import write_tiny_gguf

    return read_gguf_header(write_tiny_gguf(tmp_path_factory.mktemp("checks") / "tiny.gguf"))


def test_an_absurd_context_is_refused_with_the_estimate(header):
    message = memory_refusal(header, LoadParams(n_ctx=999_999_999), cpu_machine(4 * GIB))
    assert message is not None
    assert message.startswith("A context of 999,999,999 tokens will not fit in this machine's memory")
    assert "KV cache alone needs 238.4 GiB" in message and "of 4.0 GiB system RAM" in message
    assert "Lower the context to" in message


def test_a_context_that_fits_is_not_refused(header):
    assert memory_refusal(header, LoadParams(n_ctx=4096), cpu_machine(4 * GIB)) is None


def test_a_gpu_machine_that_can_run_it_from_ram_is_not_refused(header):
    """All layers asked for, 1 GiB of VRAM free: too big for the GPU, but a CPU build runs it from 64 GiB RAM."""
    gpu = MachineMemory(("GPU",), (1 * GIB,), (8 * GIB,), 128 * GIB, 64 * GIB, None)
    params = LoadParams(n_ctx=1_000_000)
    assert memory_refusal(header, params, cpu_machine(1 * GIB)) is not None
    assert memory_refusal(header, params, gpu) is None
    assert memory_refusal(header, LoadParams(n_ctx=999_999_999), gpu) is not None


def test_a_model_too_big_at_any_context_is_left_to_llama_cpp(header):
    """Memory-mapped weights can still run; only a KV cache beyond all memory is refused then."""
    params = LoadParams(n_ctx=512)
    kv = estimate_memory(header, estimate_settings(params)).kv_cache_bytes
    assert memory_refusal(header, params, cpu_machine(kv)) is None
    assert memory_refusal(header, params, cpu_machine(kv - 1)) is not None


def test_context_beyond_training_names_both_sizes():
    assert context_beyond_training(2048, 2048) is None and context_beyond_training(4096, None) is None
    warning = context_beyond_training(32768, 8192)
    assert warning is not None and "32,768 tokens" in warning and "8,192 tokens" in warning
    assert "RoPE scaling" in warning


def test_the_refusal_counts_llama_cpp_s_amx_copies_on_a_cpu_with_amx(header):
    params = LoadParams(n_ctx=8192)
    on_cpu = replace(estimate_settings(params), n_gpu_layers=0)  # no GPU here: every layer on the host
    amx = estimate_memory(header, replace(on_cpu, cpu_amx=True))
    assert amx.weights_amx_bytes > 0
    available = amx.host_bytes - 1  # enough without the AMX copies, not with them
    assert memory_refusal(header, params, cpu_machine(available)) is None
    message = memory_refusal(header, params, replace(cpu_machine(available), cpu_amx=True))
    assert message is not None and "Lower the context to" in message
