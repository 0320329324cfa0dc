"""Compare the memory estimate with what llama.cpp actually allocates (``llm-workstation bench estimate``).

Each measurement loads the model in a child process (``app.backends.llamacpp.probe``) with ``verbose=True`` and
parses the buffer sizes llama.cpp logs; the estimate for the same settings is computed from the header alone, with
llama.cpp's AMX weight copies where this machine uses AMX (``app.backends.llamacpp.cpu_features``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from app.backends.llamacpp.cpu_features import llama_cpp_uses_amx
from app.core import safe_json
from app.core.gguf.header import read_gguf_header
from app.core.memory.estimate import EstimateSettings, MemoryEstimate, estimate_memory
from app.core.memory.llama_buffers import LlamaBuffers, parse_llama_log

COMPONENTS = ("weights", "kv_cache", "compute", "total")
PROBE_TIMEOUT_S = 300

# Settings every model is measured under: contexts, a smaller micro-batch, flash attention, quantized KV.
DEFAULT_SETTINGS = (
    EstimateSettings(n_ctx=1024),
    EstimateSettings(n_ctx=4096),
    EstimateSettings(n_ctx=4096, flash_attn=True),
    EstimateSettings(n_ctx=2048, n_batch=256, n_ubatch=256),
    EstimateSettings(n_ctx=4096, flash_attn=True, type_k="q8_0", type_v="q8_0"),
    EstimateSettings(n_ctx=3000, flash_attn=True, type_k="q4_0", type_v="q4_0"),
    EstimateSettings(n_ctx=8192, swa_full=False),
    EstimateSettings(n_ctx=4096, n_parallel=4, flash_attn=True),
    EstimateSettings(n_ctx=4096, n_parallel=3, swa_full=False),
)


class ProbeError(RuntimeError):
    """llama.cpp could not load the model in the child process."""


@dataclass(frozen=True)
class Comparison:
    model: str
    settings: EstimateSettings
    estimate: MemoryEstimate
    actual: LlamaBuffers

    def estimated(self, component: str) -> int:
        if component == "total":
            return self.estimate.total_bytes
        return int(getattr(self.estimate, f"{component}_bytes"))

    def measured(self, component: str) -> int:
        return int(getattr(self.actual, f"{component}_bytes"))

    def error_percent(self, component: str) -> float:
        """Signed error of the estimate relative to llama.cpp's figure, in percent."""
        actual = self.measured(component)
        return 0.0 if actual == 0 else (self.estimated(component) - actual) * 100.0 / actual

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "settings": asdict(self.settings),
            "estimate": {c: self.estimated(c) for c in COMPONENTS},
            "actual": {c: self.measured(c) for c in COMPONENTS},
            "error_percent": {c: round(self.error_percent(c), 2) for c in COMPONENTS},
            "cpu_copies": {  # the CPU backend's weight copies by buffer: estimate and llama.cpp's figure
                "AMX": [self.estimate.weights_amx_bytes, self.actual.model.get("AMX", 0)],
                "CPU_REPACK": [self.estimate.weights_repack_bytes, self.actual.model.get("CPU_REPACK", 0)],
            },
        }


def probe_settings(settings: EstimateSettings) -> dict[str, object]:
    return asdict(settings)


def measure(model: Path, settings: EstimateSettings, python: str = sys.executable) -> LlamaBuffers:
    """Load ``model`` in a child llama.cpp with these settings; the buffer sizes it logged. Blocking."""
    argv = [python, "-m", "app.backends.llamacpp.probe", str(model), json.dumps(probe_settings(settings))]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ProbeError(f"llama.cpp took over {PROBE_TIMEOUT_S} s to load {model.name}") from exc
    buffers = parse_llama_log(done.stderr)
    if done.returncode != 0 or not buffers.found:
        reason = _probe_reason(done.stdout) or f"exit code {done.returncode}"
        raise ProbeError(f"llama.cpp could not load {model.name} ({reason})")
    return buffers


def _probe_reason(stdout: str) -> str | None:
    for line in reversed(stdout.splitlines()):
        try:
            return str(safe_json.loads(line, what="a line of the probe").get("error") or "") or None
        except (ValueError, AttributeError):  # ValueError: JsonError, a line that is not the probe's answer
            continue
    return None


def compare(model: Path, settings: EstimateSettings, cpu_amx: bool | None = None) -> Comparison:
    """Estimate and measure one model under one setting. Blocking (loads the model in a child process).

    ``cpu_amx``: whether llama.cpp uses AMX here (None: detect it, ``llama_cpp_uses_amx``)."""
    settings = replace(settings, cpu_amx=llama_cpp_uses_amx() if cpu_amx is None else cpu_amx)
    estimate = estimate_memory(read_gguf_header(model), settings)
    return Comparison(model.name, settings, estimate, measure(model, settings))


def generated_models(folder: Path) -> list[Path]:
    """Write the calibration shapes (random weights) into ``folder``; returns their paths."""
    from app.devtools.gguf_shapes import CALIBRATION_SHAPES, write_shaped_gguf

    folder.mkdir(parents=True, exist_ok=True)
    return [write_shaped_gguf(folder / f"{name}.gguf", **shape) for name, shape in CALIBRATION_SHAPES.items()]


def run_comparisons(
    models: Iterable[Path],
    settings: Iterable[EstimateSettings] = DEFAULT_SETTINGS,
    on_result: Callable[[Comparison | str], None] | None = None,
) -> list[Comparison]:
    """Every model under every setting; a model llama.cpp cannot load is reported (as a string) and skipped."""
    results: list[Comparison] = []
    for model in models:
        for setting in settings:
            try:
                result: Comparison | str = compare(model, setting)
            except ProbeError as exc:
                result = str(exc)
            if isinstance(result, Comparison):
                results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def worst_errors(results: list[Comparison]) -> dict[str, float]:
    """The largest absolute error per component (signed), over all results."""
    worst: dict[str, float] = {}
    for component in COMPONENTS:
        errors = [r.error_percent(component) for r in results]
        worst[component] = max(errors, key=abs) if errors else 0.0
    return worst
