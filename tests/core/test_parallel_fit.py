"""N parallel sequences on llama.cpp cost N × context KV cells: the estimate judges that against the machine, says
what does fit when N × context does not, and picks a default N from what fits (never beyond 4)."""

from __future__ import annotations

import pytest

from app.core.gguf.header import read_gguf_header
from app.core.memory.estimate import EstimateSettings, estimate_memory
from app.core.memory.fit import MachineMemory
from app.core.memory.parallel_fit import default_slots, most_fitting_slots, parallel_refusal, parallel_settings
from tests.support.gguf_factory import write_shaped_gguf

GIB = 1 << 30
SHAPE = {"architecture": "llama", "n_layer": 8, "n_embd": 512, "n_head": 8, "n_head_kv": 8, "n_ff": 1024}
PER_SEQUENCE = EstimateSettings(n_ctx=8192)


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    return read_gguf_header(write_shaped_gguf(tmp_path_factory.mktemp("parallel") / "m.gguf", **SHAPE))


def cpu_machine(ram_available: int) -> MachineMemory:
    return MachineMemory((), (), (), 64 * GIB, ram_available, "No NVIDIA GPU found.")


def needed(header, slots: int) -> int:
    return estimate_memory(header, parallel_settings(PER_SEQUENCE, slots)).total_bytes


def between(header, slots: int) -> int:
    """Free memory that holds ``slots`` sequences and not one more."""
    return (needed(header, slots) + needed(header, slots + 1)) // 2


def test_n_sequences_cost_n_contexts_of_kv_cache(header):
    one = estimate_memory(header, parallel_settings(PER_SEQUENCE, 1)).kv_cache_bytes
    assert estimate_memory(header, parallel_settings(PER_SEQUENCE, 4)).kv_cache_bytes == 4 * one


def test_what_does_not_fit_is_refused_with_what_would(header):
    room = cpu_machine(between(header, 2))  # two fit, three do not
    assert parallel_refusal(header, PER_SEQUENCE, 2, room) is None
    refusal = parallel_refusal(header, PER_SEQUENCE, 4, room)
    assert refusal is not None
    assert "4 parallel sequences × 8,192 tokens of context (32,768 KV cells" in refusal
    assert "At most 2 parallel sequences of that context fit here." in refusal
    assert most_fitting_slots(header, PER_SEQUENCE, room, 8) == 2


def test_the_default_is_what_fits_up_to_four_and_at_least_one(header):
    assert default_slots(header, PER_SEQUENCE, cpu_machine(64 * GIB)) == 4
    assert default_slots(header, PER_SEQUENCE, cpu_machine(between(header, 3))) == 3
    assert default_slots(header, PER_SEQUENCE, cpu_machine(1024)) == 1
