from __future__ import annotations

import pytest

from app.core.gguf.quant_names import HubFile, group_gguf_files, parse_quant, parse_split, same_quant


@pytest.mark.parametrize(
    ("name", "quant"),
    [
        ("Qwen2.5-7B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        ("llama-2-7b.Q8_0.gguf", "Q8_0"),
        ("Meta-Llama-3-8B-Instruct-IQ4_XS.gguf", "IQ4_XS"),
        ("model-iq2_xxs.gguf", "IQ2_XXS"),
        ("phi-3-mini-4k-instruct-fp16.gguf", "F16"),
        ("gemma-3-270m-it-BF16.gguf", "BF16"),
        ("gpt-oss-20b-MXFP4.gguf", "MXFP4"),
        ("Q4_K_M/big-model-Q4_K_M-00001-of-00003.gguf", "Q4_K_M"),
        ("DeepSeek-R1-UD-Q2_K_XL-00002-of-00005.gguf", "Q2_K_XL"),
        ("model-Q4_0_4_4.gguf", "Q4_0_4_4"),
        ("Qwen-7B.gguf", None),
        ("README.md", None),
    ],
)
def test_parse_quant(name: str, quant: str | None) -> None:
    assert parse_quant(name) == quant


def test_parse_split() -> None:
    split = parse_split("dir/model-Q8_0-00002-of-00003.gguf")
    assert split is not None
    assert (split.index, split.count, split.base) == (2, 3, "dir/model-Q8_0.gguf")
    assert parse_split("model-Q8_0.gguf") is None
    assert parse_split("model-00004-of-00003.gguf") is None  # an index past the count is not a shard


def test_group_gguf_files_groups_shards_in_order_and_sorts_by_size() -> None:
    files = [
        HubFile("big-Q8_0-00002-of-00002.gguf", 300),
        HubFile("big-Q8_0-00001-of-00002.gguf", 500),
        HubFile("big-Q4_K_M.gguf", 450),
        HubFile("mmproj-F16.gguf", 10),
        HubFile("config.json", 1),
        HubFile("big-IQ2_XS-00001-of-00002.gguf", 100),  # the second shard is missing
    ]
    candidates = group_gguf_files(files)
    assert [c.quant for c in candidates] == ["IQ2_XS", "Q4_K_M", "Q8_0", "F16"]
    q8 = candidates[2]
    assert [f.path for f in q8.files] == ["big-Q8_0-00001-of-00002.gguf", "big-Q8_0-00002-of-00002.gguf"]
    assert q8.size_bytes == 800 and q8.shard_count == 2 and q8.complete
    assert not candidates[0].complete
    assert candidates[-1].is_projector
    assert same_quant(candidates[1].quant, "q4_k_m") and not same_quant(None, "Q4_K_M")
