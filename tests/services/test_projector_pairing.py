"""Pairing a GGUF with its vision projector (mmproj) on the folder layouts people really have: the Hugging Face
cache (snapshots of symlinks into blobs, the projector at the repo root and the model in a quant subfolder),
flat folders holding several models, and paths with non-ASCII characters; through the core pairing the engine
uses and through the library scan the model pages show."""

from __future__ import annotations

import shutil

import pytest

from app.core.gguf.header import read_gguf_header
from app.core.gguf.projector import pair_projector, projector_facts, projector_problem
from app.services.library.index import LibraryRoots, ModelLibrary
from tests.services.test_library import add_hf_cache_file
from tests.support.gguf_factory import write_tiny_gguf
from tests.support.projector_factory import write_tiny_projector, write_tiny_vision_model


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """One of each: the vision model (embedding_length 64), its projector, another model's projector (32 wide),
    an audio-only projector, and a projector of a type llama.cpp does not know."""
    src = tmp_path_factory.mktemp("src")
    return {
        "model": write_tiny_vision_model(src / "model.gguf", name="Tiny-VL"),
        "text": write_tiny_gguf(src / "text.gguf", name="plain-text-model"),
        "projector": write_tiny_projector(src / "projector.gguf"),
        "other": write_tiny_projector(src / "other.gguf", output_size=32),
        "audio": write_tiny_projector(src / "audio.gguf", projector_type="ultravox", vision=False),
        "unknown": write_tiny_projector(src / "unknown.gguf", projector_type="holo-vision-9000"),
    }


def pair(model_path, repo_id=None):
    return pair_projector(model_path, read_gguf_header(model_path), repo_id)


def test_flat_folder_with_non_ascii_names_pairs_model_and_projector(tmp_path, files):
    folder = tmp_path / "Modèles — 視覚モデル"
    folder.mkdir()
    shutil.copy(files["model"], folder / "Tiny-VL-7B-Q4_K_M.gguf")
    shutil.copy(files["projector"], folder / "mmproj-Tiny-VL-7B-f16.gguf")
    shutil.copy(files["projector"], folder / "mmproj-Tiny-VL-7B-Q8_0.gguf")
    shutil.copy(files["text"], folder / "llama-3-8b.gguf")  # a text model beside it
    pairing = pair(folder / "Tiny-VL-7B-Q4_K_M.gguf")
    assert pairing.vision and pairing.projector == str(folder / "mmproj-Tiny-VL-7B-f16.gguf")  # F16 preferred
    assert pairing.size_bytes == files["projector"].stat().st_size
    text = pair(folder / "llama-3-8b.gguf")  # the projectors belong to the other model: no noise for this one
    assert not text.vision and text.problem is None


def test_hf_cache_snapshot_pairs_through_symlinks_up_to_the_snapshot_root(tmp_path, files):
    hub = tmp_path / "hub"
    model = add_hf_cache_file(hub, "org/Tiny-VL-GGUF", "Q4_K_M/Tiny-VL-Q4_K_M.gguf", files["model"], ("rev1",))
    add_hf_cache_file(hub, "org/Tiny-VL-GGUF", "mmproj-F16.gguf", files["projector"], ("rev1",))
    assert model.is_symlink()
    pairing = pair(model, "org/Tiny-VL-GGUF")
    assert pairing.projector == str(model.parent.parent / "mmproj-F16.gguf")  # the snapshot's link, not the blob
    # the engine is given the same snapshot path, and the library lists one model with its projector
    scan = ModelLibrary(LibraryRoots((), hub, None)).scan()
    assert [(e.file_name, e.vision, e.projector) for e in scan.entries] == [
        ("Tiny-VL-Q4_K_M.gguf", True, pairing.projector)
    ]


def test_a_missing_projector_is_said_plainly_with_the_repo(tmp_path, files):
    hub = tmp_path / "hub"
    model = add_hf_cache_file(hub, "org/Tiny-VL-GGUF", "Tiny-VL-Q4_K_M.gguf", files["model"], ("rev1",))
    pairing = pair(model, "org/Tiny-VL-GGUF")
    assert not pairing.vision
    assert pairing.problem == (
        "This model can read images but its projector file is missing: download the mmproj-….gguf file from the "
        "same repository (org/Tiny-VL-GGUF) into the model's folder."
    )
    entry = ModelLibrary(LibraryRoots((), hub, None)).scan().entries[0]
    assert entry.projector_problem == pairing.problem and not entry.vision


def test_the_only_model_in_a_folder_takes_a_generically_named_projector(tmp_path, files):
    """The classic LLaVA layout: ggml-model-q4_k.gguf beside mmproj-model-f16.gguf, nothing in the names."""
    shutil.copy(files["text"], tmp_path / "ggml-model-q4_k.gguf")
    shutil.copy(files["projector"], tmp_path / "mmproj-model-f16.gguf")
    assert pair(tmp_path / "ggml-model-q4_k.gguf").projector == str(tmp_path / "mmproj-model-f16.gguf")
    shutil.copy(files["text"], tmp_path / "another-model.gguf")  # no longer alone: whose projector is it?
    assert pair(tmp_path / "ggml-model-q4_k.gguf").projector is None


def test_another_models_projector_is_refused_by_its_output_size(tmp_path, files):
    shutil.copy(files["model"], tmp_path / "Tiny-VL.gguf")
    shutil.copy(files["other"], tmp_path / "mmproj-Tiny-VL-f16.gguf")
    pairing = pair(tmp_path / "Tiny-VL.gguf")
    assert not pairing.vision
    assert "belongs to another model" in pairing.problem and "32-wide" in pairing.problem
    assert "reads 64" in pairing.problem


@pytest.mark.parametrize(
    ("kind", "words"),
    [("audio", "a projector for audio, not for images"), ("unknown", "'holo-vision-9000' projector")],
)
def test_wrong_projector_types_are_named(tmp_path, files, kind, words):
    shutil.copy(files["model"], tmp_path / "Tiny-VL.gguf")
    shutil.copy(files[kind], tmp_path / "mmproj-Tiny-VL.gguf")
    model = read_gguf_header(tmp_path / "Tiny-VL.gguf")
    problem = projector_problem(model, projector_facts(read_gguf_header(tmp_path / "mmproj-Tiny-VL.gguf")))
    assert problem is not None and words in problem and problem.startswith("mmproj-Tiny-VL.gguf ")
    pairing = pair(tmp_path / "Tiny-VL.gguf")
    assert (pairing.vision, pairing.problem) == (False, problem)


def test_the_fitting_projector_wins_over_a_wrong_one(tmp_path, files):
    shutil.copy(files["model"], tmp_path / "Tiny-VL.gguf")
    shutil.copy(files["other"], tmp_path / "mmproj-Tiny-VL-f16.gguf")  # preferred by name, but 32 wide
    shutil.copy(files["projector"], tmp_path / "mmproj-Tiny-VL-q8_0.gguf")
    assert pair(tmp_path / "Tiny-VL.gguf").projector == str(tmp_path / "mmproj-Tiny-VL-q8_0.gguf")


def test_library_lists_projectors_only_beside_their_models(tmp_path, files):
    folder = tmp_path / "models"
    (folder / "vl").mkdir(parents=True)
    shutil.copy(files["model"], folder / "vl" / "Tiny-VL.gguf")
    shutil.copy(files["projector"], folder / "vl" / "mmproj-f16.gguf")
    shutil.copy(files["other"], folder / "stray-mmproj.gguf")  # a projector is never listed as a chat model
    shutil.copy(files["text"], folder / "plain.gguf")
    scan = ModelLibrary(LibraryRoots((folder,), None, None)).scan()
    by_file = {e.file_name: e for e in scan.entries}
    assert set(by_file) == {"Tiny-VL.gguf", "plain.gguf"}
    vl = by_file["Tiny-VL.gguf"]
    assert (vl.vision, vl.projector, vl.projector_bytes) == (
        True, str(folder / "vl" / "mmproj-f16.gguf"), files["projector"].stat().st_size,
    )  # fmt: skip
    plain = by_file["plain.gguf"]  # alone in its folder with a projector: it is taken as its own, and does not fit
    assert not plain.vision and "stray-mmproj.gguf belongs to another model" in plain.projector_problem
    again = ModelLibrary(LibraryRoots((folder,), None, None)).scan()  # same answer from a fresh scan
    assert {e.file_name: e.projector for e in again.entries} == {k: e.projector for k, e in by_file.items()}


def test_a_download_folder_with_the_model_in_a_quant_subfolder_pairs(tmp_path, files):
    """Discover's own layout (``<dir>/<org>/<name>/<repo path>``): the projector at the repo's root, the model in
    ``Q4_K_M/``."""
    repo = tmp_path / "downloads" / "org" / "Tiny-VL-GGUF"
    (repo / "Q4_K_M").mkdir(parents=True)
    shutil.copy(files["model"], repo / "Q4_K_M" / "Tiny-VL-Q4_K_M.gguf")
    shutil.copy(files["projector"], repo / "mmproj-F16.gguf")
    assert pair(repo / "Q4_K_M" / "Tiny-VL-Q4_K_M.gguf").projector == str(repo / "mmproj-F16.gguf")
    entry = ModelLibrary(LibraryRoots((tmp_path / "downloads",), None, None)).scan().entries[0]
    assert entry.vision and entry.projector == str(repo / "mmproj-F16.gguf")
