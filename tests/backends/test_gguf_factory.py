"""The generated tiny GGUF files work with the real llama-cpp-python (and the broken ones fail to load)."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from tests.support.gguf_factory import (
    CHATML_TEMPLATE,
    IM_END_TOKEN,
    IM_START_TOKEN,
    write_not_gguf,
    write_tiny_gguf,
    write_truncated_gguf,
    write_unknown_architecture_gguf,
)

MESSAGES = [{"role": "user", "content": "hi"}]


def _load(path: Path) -> Llama:
    return Llama(model_path=str(path), n_ctx=512, verbose=False)


@pytest.fixture
def llm(tiny_gguf):
    model = _load(tiny_gguf)
    yield model
    model.close()


# --- the files themselves ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "writer",
    [
        write_tiny_gguf,
        lambda p: write_tiny_gguf(p, chat_template=None),
        write_unknown_architecture_gguf,
        write_truncated_gguf,
        write_not_gguf,
    ],
    ids=["tiny", "no-template", "bad-arch", "truncated", "not-gguf"],
)
def test_files_are_small(tmp_path, writer):
    path = writer(tmp_path / "model.gguf")
    assert path == tmp_path / "model.gguf"
    assert 0 < path.stat().st_size < 5 * 1024 * 1024


def test_writing_is_deterministic(tmp_path):
    first = write_tiny_gguf(tmp_path / "a.gguf").read_bytes()
    assert write_tiny_gguf(tmp_path / "b.gguf").read_bytes() == first
    assert write_tiny_gguf(tmp_path / "c.gguf", seed=1).read_bytes() != first


def test_tiny_gguf_metadata_as_written(tiny_gguf):
    reader = gguf.GGUFReader(tiny_gguf)
    fields = reader.fields
    assert fields["general.architecture"].contents() == "llama"
    assert fields["tokenizer.ggml.model"].contents() == "gpt2"
    assert fields["tokenizer.chat_template"].contents() == CHATML_TEMPLATE
    tokens = fields["tokenizer.ggml.tokens"].contents()
    merges = fields["tokenizer.ggml.merges"].contents()
    assert len(tokens) > 256 + 200
    assert len(merges) >= 200
    assert {IM_START_TOKEN, IM_END_TOKEN} <= set(tokens)
    assert fields["tokenizer.ggml.eos_token_id"].contents() == tokens.index(IM_END_TOKEN)
    names = {t.name for t in reader.tensors}
    per_layer = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]
    expected = {"token_embd.weight", "output_norm.weight", "output.weight"}
    expected |= {f"blk.{i}.{t}.weight" for i in range(2) for t in per_layer}
    assert names == expected


def test_bad_files_look_as_intended(bad_arch_gguf, truncated_gguf, not_a_gguf, tiny_gguf):
    assert gguf.GGUFReader(bad_arch_gguf).fields["general.architecture"].contents() == "nosucharch"
    data = truncated_gguf.read_bytes()
    assert data[:4] == b"GGUF"
    assert len(data) < tiny_gguf.stat().st_size
    assert not_a_gguf.suffix == ".gguf"
    assert not_a_gguf.read_bytes()[:4] != b"GGUF"


# --- loading with the real llama.cpp ---------------------------------------------------------------------------


def test_tiny_gguf_loads(tiny_gguf):
    model = _load(tiny_gguf)
    try:
        assert model.n_ctx() == 512
        assert model.metadata["general.architecture"] == "llama"
        assert model.metadata["general.name"] == "tiny-test-model"
        assert model.metadata["tokenizer.chat_template"] == CHATML_TEMPLATE
    finally:
        model.close()


def test_tokenize_detokenize_round_trip(llm):
    text = "Hello, world! The quick brown fox can't jump over 123 lazy dogs; it's just a test."
    tokens = llm.tokenize(text.encode(), add_bos=False, special=False)
    assert len(tokens) < len(text.encode())  # the merges do something
    assert llm.detokenize(tokens).decode() == text


def test_control_tokens_are_single_tokens(llm):
    tokens = llm.tokenize(f"{IM_START_TOKEN}user\nhi{IM_END_TOKEN}".encode(), add_bos=False, special=True)
    assert tokens[0] == llm.tokenize(IM_START_TOKEN.encode(), add_bos=False, special=True)[0]
    assert tokens[-1] == llm.token_eos()
    assert llm.detokenize([llm.token_eos()], special=True) == IM_END_TOKEN.encode()


def test_chat_template_renders(llm):
    formatter = Jinja2ChatFormatter(
        template=llm.metadata["tokenizer.chat_template"],
        eos_token=IM_END_TOKEN,
        bos_token="",
    )
    prompt = formatter(messages=MESSAGES).prompt
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_streaming_chat_completion(llm):
    chunks = list(llm.create_chat_completion(messages=MESSAGES, max_tokens=8, stream=True))
    assert len(chunks) >= 2
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["finish_reason"] in {"stop", "length"}
    contents = [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]]
    assert all(isinstance(c, str) for c in contents)
    assert len(contents) <= 8


def test_non_streaming_chat_completion_counts_tokens(llm):
    result = llm.create_chat_completion(messages=MESSAGES, max_tokens=4, temperature=0.0)
    prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert result["usage"]["prompt_tokens"] == len(llm.tokenize(prompt.encode(), add_bos=False, special=True))
    assert result["usage"]["completion_tokens"] <= 4


def test_no_template_file_loads_without_template(tiny_gguf_no_template):
    model = _load(tiny_gguf_no_template)
    try:
        assert "tokenizer.chat_template" not in model.metadata
        assert model.metadata["general.architecture"] == "llama"
    finally:
        model.close()


@pytest.mark.parametrize("fixture", ["bad_arch_gguf", "truncated_gguf", "not_a_gguf"])
def test_bad_files_fail_to_load(request, fixture):
    path = request.getfixturevalue(fixture)
    # llama.cpp only logs the real reason (unknown architecture / tensor data out of file bounds / invalid magic);
    # llama-cpp-python raises the same generic ValueError for all of them.
    with pytest.raises(ValueError, match="Failed to load model from file"):
        _load(path)
