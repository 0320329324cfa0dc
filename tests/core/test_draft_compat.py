"""draft_compat on real GGUFs: the factory's tiny models and header-only GGUFs written with the gguf package."""

from __future__ import annotations

from pathlib import Path

import gguf

from app.core.gguf.draft_compat import check_draft
from tests.support.gguf_factory import write_tiny_gguf


def _vocab_gguf(path: Path, tokens: list[str], *, arch: str = "llama", eos: int = 1) -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(eos)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_same_tokenizer_can_draft(tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "big.gguf", n_layer=2, seed=1)
    draft = write_tiny_gguf(tmp_path / "small.gguf", n_layer=1, seed=2)
    assert check_draft(draft, model).ok


def test_same_file_is_refused(tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "m.gguf")
    verdict = check_draft(model, model)
    assert not verdict.ok and "model itself" in verdict.reason


def test_vocabulary_size_differs(tmp_path: Path) -> None:
    model = _vocab_gguf(tmp_path / "m.gguf", [f"t{i}" for i in range(300)])
    draft = _vocab_gguf(tmp_path / "d.gguf", [f"t{i}" for i in range(200)])
    assert check_draft(draft, model).reason == "vocabulary size differs: 200 vs 300"


def test_special_token_id_differs(tmp_path: Path) -> None:
    tokens = [f"t{i}" for i in range(300)]
    model = _vocab_gguf(tmp_path / "m.gguf", tokens, eos=1)
    draft = _vocab_gguf(tmp_path / "d.gguf", tokens, eos=2)
    assert check_draft(draft, model).reason == "EOS token id differs: 2 vs 1"


def test_vocabulary_sample_differs(tmp_path: Path) -> None:
    tokens = [f"t{i}" for i in range(300)]
    other = [*tokens[:-1], "zz"]
    verdict = check_draft(_vocab_gguf(tmp_path / "d.gguf", other), _vocab_gguf(tmp_path / "m.gguf", tokens))
    assert verdict.reason == "token 299 differs: 'zz' vs 't299'"


def test_projector_never_drafts(tmp_path: Path) -> None:
    tokens = [f"t{i}" for i in range(300)]
    model = _vocab_gguf(tmp_path / "m.gguf", tokens)
    clip = _vocab_gguf(tmp_path / "vision.gguf", tokens, arch="clip")
    assert "projector" in check_draft(clip, model).reason
    named = _vocab_gguf(tmp_path / "mmproj-model.gguf", tokens)
    assert "projector" in check_draft(named, model).reason


def test_unreadable_draft(tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "m.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf")
    verdict = check_draft(bad, model)
    assert not verdict.ok and "cannot be read" in verdict.reason
