"""``llm-workstation inspect`` and ``bench estimate`` as a user runs them: real processes, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.backends.llamacpp.cpu_features import llama_cpp_uses_amx
from app.core.gguf.header import read_gguf_header
from app.core.memory.cpu_copies import amx_bytes


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_inspect_json_is_one_object(tiny_gguf):
    result = cli("inspect", str(tiny_gguf), "--ctx", "1000", "--kv-type-k", "q8_0", "--flash-attn", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["architecture"] == "llama" and data["block_count"] == 2 and data["file_type"] == "F16"
    estimate = data["estimate"]
    for key in ("weights_bytes", "kv_cache_bytes", "compute_bytes", "total_bytes", "gpu_bytes", "host_bytes"):
        assert isinstance(estimate[key], int)
    # 2 layers x 1024 cells x (K: 32 values in q8_0 = 34 bytes + V: 32 values in f16 = 64 bytes)
    assert estimate["kv_cache_bytes"] == 2 * 1024 * (34 + 64)
    tensors = read_gguf_header(tiny_gguf).tensors
    assert data["cpu_amx"] == llama_cpp_uses_amx()  # llama.cpp's AMX copies of the f16 matrices where it uses AMX
    amx = sum(amx_bytes(t) or 0 for t in tensors) if data["cpu_amx"] else 0
    assert estimate["weights_amx_bytes"] == amx and estimate["weights_repack_bytes"] == 0
    assert estimate["weights_bytes"] == sum(t.n_bytes for t in tensors) + amx
    assert data["fits"]["state"] in ("fits", "tight", "wont_fit") and data["fits"]["needed_bytes"] > 0


def test_inspect_plain_summary(tiny_gguf):
    result = cli("inspect", str(tiny_gguf))
    assert result.returncode == 0, result.stderr
    assert "tiny-test-model (llama" in result.stdout and "Memory at n_ctx=4096" in result.stdout
    assert "Fits" in result.stdout or "fit" in result.stdout
    assert ("AMX (this CPU has Intel AMX)" in result.stdout) == llama_cpp_uses_amx()


@pytest.mark.parametrize("fixture", ["not_a_gguf", "truncated_gguf"])
def test_bad_files_exit_2_with_one_line(request, fixture):
    result = cli("inspect", str(request.getfixturevalue(fixture)))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("llm-workstation: ") and result.stderr.count("\n") == 1


def test_missing_file_and_bad_settings(tmp_path, tiny_gguf):
    missing = cli("inspect", str(tmp_path / "nope.gguf"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    quantized_v = cli("inspect", str(tiny_gguf), "--kv-type-v", "q4_0")
    assert quantized_v.returncode == 2 and "needs flash attention" in quantized_v.stderr
    zero_ctx = cli("inspect", str(tiny_gguf), "--ctx", "0")
    assert zero_ctx.returncode == 2 and "at least 1 token" in zero_ctx.stderr


@pytest.mark.slow
def test_bench_estimate_on_a_given_model(tmp_path):
    from tests.support.gguf_factory import write_shaped_gguf

    model = write_shaped_gguf(tmp_path / "m.gguf", n_layer=4, n_embd=512, n_head=8, n_head_kv=2, n_ff=1024)
    result = cli("bench", "estimate", str(model), "--json", timeout=300)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert len(data["results"]) >= 6
    assert abs(data["worst_error_percent"]["kv_cache"]) <= 5 and abs(data["worst_error_percent"]["total"]) <= 10


def test_bench_estimate_bad_model(not_a_gguf):
    result = cli("bench", "estimate", str(not_a_gguf))
    assert result.returncode == 2 and "not a GGUF" in result.stderr


def test_header_without_shape_metadata_exits_2(tmp_path):
    import gguf

    path = tmp_path / "bare.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    result = cli("inspect", str(path))
    assert result.returncode == 2 and "has no llama.block_count" in result.stderr
