"""A draft model for speculative decoding joins the memory estimate: its weights, KV cache and buffers at the
model's context, and a load that fits alone but not with its draft is refused."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from app.core.gguf.header import read_gguf_header
from app.core.load_checks import draft_header, estimate_settings, memory_refusal
from app.core.memory.estimate import estimate_memory
from app.core.memory.fit import MachineMemory
from app.core.params import LoadParams
from tests.support.gguf_factory import write_tiny_gguf


def _machine(ram_available: int) -> MachineMemory:
    return MachineMemory((), (), (), 64 * 2**30, ram_available, "no GPU in this test")


def test_the_draft_adds_its_own_estimate_at_the_same_context(tmp_path: Path):
    model = read_gguf_header(write_tiny_gguf(tmp_path / "m.gguf", n_layer=4, n_embd=128))
    draft = read_gguf_header(write_tiny_gguf(tmp_path / "d.gguf", n_layer=1))
    settings = estimate_settings(LoadParams(n_ctx=8192))
    alone = estimate_memory(model, settings)
    draft_alone = estimate_memory(draft, settings)
    both = estimate_memory(model, replace(settings, draft=draft))
    assert both.draft_bytes == draft_alone.total_bytes > 0
    assert both.total_bytes == alone.total_bytes + draft_alone.total_bytes
    assert both.host_bytes == alone.host_bytes + draft_alone.host_bytes
    bigger = estimate_memory(model, replace(settings, n_ctx=16384, draft=draft))
    assert bigger.draft_bytes > both.draft_bytes  # its KV cache grows with the context


def test_a_load_that_fits_alone_but_not_with_its_draft_is_refused(tmp_path: Path):
    model_path = write_tiny_gguf(tmp_path / "m.gguf", n_layer=2)
    draft_path = write_tiny_gguf(tmp_path / "d.gguf", n_layer=8, n_embd=256, n_ff=512, name="big-draft")
    model = read_gguf_header(model_path)
    plain, drafted = LoadParams(n_ctx=16384), LoadParams(n_ctx=16384, speculative=f"draft:{draft_path}")
    on_cpu = replace(estimate_settings(plain), n_gpu_layers=0)  # as a machine without a GPU runs it
    alone = estimate_memory(model, on_cpu).host_bytes
    with_draft = estimate_memory(model, replace(on_cpu, draft=draft_header(drafted))).host_bytes
    machine = _machine((alone + with_draft) // 2)
    assert memory_refusal(model, plain, machine) is None
    refusal = memory_refusal(model, drafted, machine)
    assert refusal is not None and "will not fit" in refusal
    assert draft_header(LoadParams(speculative="ngram")) is None
    assert draft_header(LoadParams(speculative=f"draft:{tmp_path / 'missing.gguf'}")) is None
