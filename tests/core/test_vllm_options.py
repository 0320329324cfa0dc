"""VllmServerOptions: argv for both launch styles, shell and Docker lines, secrets, version gating, validation."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from app.core.vllm.options import (
    API_MODULE,
    SECRET_MASK,
    VllmServerOptions,
    docker_command,
    parse_version,
    serve_argv,
    serve_env,
    shell_command,
    unsupported_flags,
    validate,
)

KEY = "sk-very-secret-123"


def full_options(**overrides) -> VllmServerOptions:
    values = dict(
        model="/models/Qwen3-0.6B",
        served_model_name="qwen",
        max_model_len=4096,
        gpu_memory_utilization=0.85,
        max_num_seqs=64,
        max_num_batched_tokens=8192,
        kv_cache_dtype="fp8",
        quantization="awq",
        dtype="bfloat16",
        tensor_parallel_size=2,
        enable_prefix_caching=False,
        enforce_eager=True,
        kv_offloading_size=4.0,
        api_key=KEY,
        extra_args=["--block-size", "16"],
        port=8123,
    )
    values.update(overrides)
    return VllmServerOptions(**values)


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# --- argv ---------------------------------------------------------------------------------------------------------


def test_module_argv_starts_with_the_interpreter_and_model():
    argv = serve_argv(Path("/venv/bin/python"), VllmServerOptions(model="Qwen/Qwen3-0.6B", port=9000))
    assert argv == [
        "/venv/bin/python",
        "-m",
        API_MODULE,
        "--model",
        "Qwen/Qwen3-0.6B",
        "--host",
        "127.0.0.1",
        "--port",
        "9000",
        "--enable-auto-tool-choice",  # a Qwen model: its tool calls are read with vLLM's hermes parser
        "--tool-call-parser",
        "hermes",
    ]


def test_serve_argv_uses_the_console_script_next_to_python():
    argv = serve_argv("/venv/bin/python", VllmServerOptions(model="Qwen/Qwen3-0.6B"), use_module=False)
    assert argv[:3] == ["/venv/bin/vllm", "serve", "Qwen/Qwen3-0.6B"]
    assert "--model" not in argv and "--port" not in argv  # no port: vLLM's default
    assert serve_argv("python", VllmServerOptions(model="m"), use_module=False)[:2] == ["vllm", "serve"]


def test_every_option_reaches_argv_as_separate_items():
    argv = serve_argv("python", full_options())
    assert flag_value(argv, "--served-model-name") == "qwen"
    assert flag_value(argv, "--max-model-len") == "4096"
    assert flag_value(argv, "--gpu-memory-utilization") == "0.85"
    assert flag_value(argv, "--max-num-seqs") == "64"
    assert flag_value(argv, "--max-num-batched-tokens") == "8192"
    assert flag_value(argv, "--kv-cache-dtype") == "fp8"
    assert flag_value(argv, "--quantization") == "awq"
    assert flag_value(argv, "--dtype") == "bfloat16"
    assert flag_value(argv, "--tensor-parallel-size") == "2"
    assert flag_value(argv, "--kv-offloading-size") == "4"
    assert flag_value(argv, "--kv-offloading-backend") == "native"
    assert "--no-enable-prefix-caching" in argv and "--enforce-eager" in argv
    assert argv[-2:] == ["--block-size", "16"]


def test_prefix_caching_none_true_false():
    assert not {"--enable-prefix-caching", "--no-enable-prefix-caching"} & set(
        serve_argv("python", VllmServerOptions(model="m"))
    )
    assert "--enable-prefix-caching" in serve_argv("python", VllmServerOptions(model="m", enable_prefix_caching=True))


def test_api_key_never_reaches_argv_but_the_environment():
    options = full_options()
    assert KEY not in " ".join(serve_argv("python", options))
    assert serve_env(options) == {"VLLM_API_KEY": KEY}
    assert serve_env(VllmServerOptions(model="m")) == {}
    assert KEY not in repr(options)


def test_a_model_path_with_spaces_stays_one_argument():
    argv = serve_argv("python", VllmServerOptions(model="/my models/a b"))
    assert flag_value(argv, "--model") == "/my models/a b"


# --- shell and docker lines ---------------------------------------------------------------------------------------


def test_shell_command_masks_secrets_unless_asked():
    options = full_options(model="/my models/q")
    argv = serve_argv("/venv/bin/python", options)
    env = {**serve_env(options), "VLLM_CPU_KVCACHE_SPACE": "4", "HF_TOKEN": "hf_abc"}
    line = shell_command(argv, env)
    assert KEY not in line and "hf_abc" not in line
    assert f"VLLM_API_KEY={shlex.quote(SECRET_MASK)}" in line and "VLLM_CPU_KVCACHE_SPACE=4" in line
    words = shlex.split(line)
    assert words[3:] == argv  # the environment words, then the argv exactly
    revealed = shell_command(argv, env, reveal_secrets=True)
    assert f"VLLM_API_KEY={KEY}" in revealed


def test_shell_command_masks_an_api_key_typed_into_argv():
    line = shell_command(["vllm", "serve", "m", "--api-key", KEY, f"--api-key={KEY}"])
    assert KEY not in line
    assert shlex.split(line)[-2:] == [SECRET_MASK, f"--api-key={SECRET_MASK}"]


def test_docker_command_for_a_repo_id():
    line = docker_command(full_options(model="Qwen/Qwen3-0.6B"), tag="v0.33.0")
    assert line.startswith("docker run --rm --gpus all --ipc=host -p 127.0.0.1:8123:8000 ")
    assert "-v ~/.cache/huggingface:/root/.cache/huggingface" in line
    assert "-e HF_TOKEN " in line and "vllm/vllm-openai:v0.33.0 --model Qwen/Qwen3-0.6B" in line
    assert KEY not in line and f"VLLM_API_KEY={SECRET_MASK}" in line
    words = shlex.split(line)
    assert "--host" not in words and "--port" not in words  # the container's own: 0.0.0.0:8000
    assert flag_value(words, "--served-model-name") == "qwen" and "--enforce-eager" in words


def test_docker_command_mounts_a_local_folder_read_only():
    line = docker_command(VllmServerOptions(model="/data/my models/Qwen3"))
    words = shlex.split(line)
    assert "/data/my models/Qwen3:/models/Qwen3:ro" in words
    assert flag_value(words, "--model") == "/models/Qwen3"
    assert "-p" in words and flag_value(words, "-p") == "127.0.0.1:8000:8000"
    assert "vllm/vllm-openai:latest" in words


# --- versions -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.32.0", (0, 32, 0)), ("0.6.6.post2.dev189+g619ae268", (0, 6, 6)), ("0.11.1rc3", (0, 11, 1)), ("1", (1, 0, 0))],
)
def test_parse_version(text, expected):
    assert parse_version(text) == expected


def test_parse_version_rejects_garbage():
    with pytest.raises(ValueError):
        parse_version("unknown")


def test_a_current_vllm_supports_every_option():
    assert unsupported_flags(full_options(), "0.32.0") == []
    assert unsupported_flags(full_options(), "0.33.0", use_module=False) == []


def test_old_versions_are_told_which_flag_needs_what():
    messages = unsupported_flags(full_options(), "0.10.2")
    assert messages == [
        "--kv-offloading-size needs vLLM ≥ 0.11.1; installed is 0.10.2. Update vLLM or clear that setting.",
        "--kv-offloading-backend needs vLLM ≥ 0.11.1; installed is 0.10.2. Update vLLM or clear that setting.",
    ]
    old = unsupported_flags(full_options(kv_offloading_size=None), "0.4.2", use_module=False)
    assert any(m.startswith("`vllm serve` needs vLLM ≥ 0.5.1") for m in old)
    assert any(m.startswith("--no-enable-prefix-caching needs vLLM ≥ 0.6.5; installed is 0.4.2") for m in old)


def test_removed_flags_in_extra_args_are_reported():
    options = VllmServerOptions(model="m", extra_args=["--swap-space=4"])
    assert unsupported_flags(options, "0.17.1") == []
    assert unsupported_flags(options, "0.32.0") == [
        "--swap-space was removed in vLLM 0.18.0; installed is 0.32.0. Remove it from the extra arguments."
    ]


# --- validation ---------------------------------------------------------------------------------------------------


def test_good_options_validate():
    assert validate(full_options()) == []
    assert validate(VllmServerOptions(model="Qwen/Qwen3-0.6B", max_model_len=-1)) == []


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"model": "  "}, "Choose a model"),
        ({"model": "--help"}, "starts with '-'"),
        ({"max_model_len": 0}, "Maximum context length"),
        ({"gpu_memory_utilization": 1.5}, "between 0 and 1"),
        ({"gpu_memory_utilization": 0.0}, "between 0 and 1"),
        ({"gpu_memory_utilization": float("nan")}, "between 0 and 1"),
        ({"max_num_seqs": 0}, "Maximum concurrent sequences must be greater than 0"),
        ({"max_num_batched_tokens": -5}, "Maximum batched tokens"),
        ({"tensor_parallel_size": 0}, "Tensor-parallel size"),
        ({"kv_offloading_size": 0.0}, "KV offloading size"),
        ({"port": 70000}, "Port must be between 1 and 65535"),
        ({"kv_cache_dtype": "int3"}, "not a KV-cache type"),
        ({"dtype": "fp64"}, "not a weight dtype"),
        ({"quantization": "AWQ please"}, "not a quantization method"),
        ({"served_model_name": "my model"}, "single word"),
        ({"host": "0.0.0.0"}, "only served on this computer"),
        ({"api_key": "a b"}, "API key must not"),
        ({"extra_args": ["--api-key", "x"]}, "API key has its own setting"),
        ({"extra_args": ["--port=1"]}, "--port has its own setting"),
    ],
)
def test_bad_values_get_a_message(overrides, fragment):
    messages = validate(full_options(**overrides))
    assert any(fragment in message for message in messages), messages


def test_future_kv_cache_families_are_accepted():
    assert validate(VllmServerOptions(model="m", kv_cache_dtype="turboquant_3bit")) == []


def test_display_name_prefers_the_served_name():
    assert VllmServerOptions(model="Qwen/Qwen3-0.6B").display_name == "Qwen/Qwen3-0.6B"
    assert VllmServerOptions(model="Qwen/Qwen3-0.6B", served_model_name="q").display_name == "q"
