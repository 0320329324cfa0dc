"""Test-wide setup: Qt offscreen, an isolated app home, and the tiny GGUF fixtures."""

from __future__ import annotations

import logging
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest


@pytest.fixture
def logger():
    """A private logger under ``app`` that does not propagate, so a test sees only its own handlers."""
    log = logging.getLogger("app.tests.logbuffer")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    yield log
    for handler in list(log.handlers):
        log.removeHandler(handler)
    log.propagate = True
    log.setLevel(logging.NOTSET)


@pytest.fixture
def buffer(logger):
    """A LogBuffer attached to ``logger``."""
    from app.services.logbuffer import LogBuffer

    buf = LogBuffer()
    logger.addHandler(buf)
    return buf


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """Every test gets its own config/data/cache folders."""
    home = tmp_path / "llmw-home"
    monkeypatch.setenv("LLMW_HOME", str(home))
    return home


# --- Tiny GGUF model files (tests/support/gguf_factory.py), written once per test session ----------------------------


@pytest.fixture(scope="session")
def _gguf_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf")


@pytest.fixture(scope="session")
def tiny_gguf(_gguf_dir):
    """A loadable tiny llama GGUF (random weights, real BPE tokenizer) with a ChatML chat template."""
    from tests.support.gguf_factory import write_tiny_gguf

    return write_tiny_gguf(_gguf_dir / "tiny-chatml.gguf")


@pytest.fixture(scope="session")
def tiny_gguf_no_template(_gguf_dir):
    """Like ``tiny_gguf`` but without ``tokenizer.chat_template``."""
    from tests.support.gguf_factory import write_tiny_gguf

    return write_tiny_gguf(_gguf_dir / "tiny-no-template.gguf", chat_template=None, name="tiny-no-template")


@pytest.fixture(scope="session")
def bad_arch_gguf(_gguf_dir):
    """A well-formed GGUF whose architecture ('nosucharch') llama.cpp cannot load."""
    from tests.support.gguf_factory import write_unknown_architecture_gguf

    return write_unknown_architecture_gguf(_gguf_dir / "bad-arch.gguf")


@pytest.fixture(scope="session")
def truncated_gguf(_gguf_dir):
    """A tiny GGUF cut in half: valid header and metadata, missing tensor data."""
    from tests.support.gguf_factory import write_truncated_gguf

    return write_truncated_gguf(_gguf_dir / "truncated.gguf")


@pytest.fixture(scope="session")
def not_a_gguf(_gguf_dir):
    """A text file named like a model (``.gguf``)."""
    from tests.support.gguf_factory import write_not_gguf

    return write_not_gguf(_gguf_dir / "not-a-model.gguf")


@pytest.fixture(scope="session")
def long_context_gguf(_gguf_dir):
    """A tiny chat model with an 8k training context: greedy decoding runs to max_tokens, for stop/kill tests."""
    from tests.support.gguf_factory import write_tiny_gguf

    return write_tiny_gguf(_gguf_dir / "tiny-8k.gguf", context_length=8192, name="tiny-8k", never_eos=True)


# --- vLLM (tests/support/vllm_support.py): a tiny HF Llama, and ONE real server for the whole session -----------------


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    """A tiny Hugging Face-format Llama folder (random weights, real BPE tokenizer, ChatML template) vLLM can serve."""
    from tests.support.vllm_support import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("hf") / "tiny-llama")


@pytest.fixture(scope="session")
def vllm_python_path():
    """The vLLM interpreter (LLMW_VLLM_PYTHON, else ~/.cache/llm-workstation/ci-vllm-venv …); skips if none."""
    from tests.support.vllm_support import vllm_python, vllm_python_missing_reason

    python = vllm_python()
    if python is None:
        pytest.skip(vllm_python_missing_reason())
    return python


@pytest.fixture(scope="session")
def vllm_server(vllm_python_path, tiny_llama_dir):
    """One real vLLM server on the tiny model for the session (``RunningVllm``: .base_url, .served_model_name,
    .api_key, .headers, .phases, .lines, .server). Started on first use (~30–90 s on 2 cores), stopped at the end."""
    from tests.support.vllm_support import running_vllm

    with running_vllm(vllm_python_path, tiny_llama_dir) as running:
        yield running
