"""Parallel sequences on llama.cpp: N sequences that each get the full context cost N × context KV cells (one KV
stream per sequence), plus an output row per sequence. These judge that against the machine, from the same
estimate as a single load: does N fit, and the most that fits (the default N when the model has no setting)."""

from __future__ import annotations

from dataclasses import replace

from app.core.gguf.header import GgufFileError, GgufHeader
from app.core.memory.estimate import EstimateSettings
from app.core.memory.fit import WONT_FIT, MachineMemory, fit_verdict
from app.core.units import format_bytes

DEFAULT_MOST_SLOTS = 4  # the default never goes beyond this (more sequences share the same cores)


def parallel_settings(per_sequence: EstimateSettings, slots: int) -> EstimateSettings:
    """``per_sequence`` (its ``n_ctx`` the context of each sequence) for ``slots`` sequences at once."""
    n_batch = max(per_sequence.n_batch, slots)
    return replace(per_sequence, n_ctx=per_sequence.n_ctx * slots, n_parallel=slots, n_batch=n_batch,
                   n_ubatch=n_batch)  # fmt: skip


def parallel_refusal(
    header: GgufHeader, per_sequence: EstimateSettings, slots: int, machine: MachineMemory
) -> str | None:
    """Why ``slots`` sequences of ``per_sequence.n_ctx`` tokens each will not fit ``machine``, with the numbers and
    what would fit; None when they may fit (or the estimate cannot judge this model)."""
    try:
        verdict = fit_verdict(header, parallel_settings(per_sequence, slots), machine)
        if verdict.state != WONT_FIT:
            return None
        most = most_fitting_slots(header, per_sequence, machine, slots - 1)
    except (GgufFileError, ValueError, TypeError):
        return None
    cells = per_sequence.n_ctx * slots
    advice = (f"At most {most} parallel sequences of that context fit here." if most
              else "Not even one sequence of that context fits: lower the context size.")  # fmt: skip
    return (
        f"{slots} parallel sequences × {per_sequence.n_ctx:,} tokens of context ({cells:,} KV cells, needing "
        f"{format_bytes(verdict.needed_bytes)}) will not fit in this machine's memory. {verdict.summary} {advice}"
    )


def most_fitting_slots(header: GgufHeader, per_sequence: EstimateSettings, machine: MachineMemory, most: int) -> int:
    """The largest N up to ``most`` whose N × context fits ``machine`` (0: not even one)."""
    for slots in range(max(most, 0), 0, -1):
        if fit_verdict(header, parallel_settings(per_sequence, slots), machine).state != WONT_FIT:
            return slots
    return 0


def default_slots(header: GgufHeader, per_sequence: EstimateSettings, machine: MachineMemory) -> int:
    """N for a model without a setting: as many as fit, up to ``DEFAULT_MOST_SLOTS``, at least 1."""
    try:
        return max(1, most_fitting_slots(header, per_sequence, machine, DEFAULT_MOST_SLOTS))
    except (GgufFileError, ValueError, TypeError):
        return 1
