"""The validators for path pieces that come from remote data (app/core/remote_paths.py)."""

from __future__ import annotations

import os

import pytest

from app.core import remote_paths as rp
from app.core.errors import InvalidInputError


@pytest.mark.parametrize(
    "name",
    ["x.gguf", "sub/dir/x.gguf", "modèle-ünïcode-Q4_K_M.gguf", "模型/权重-Q8_0.gguf", "a..b.gguf", ".gitattributes"],
)
def test_legitimate_repo_file_names_pass(name):
    assert rp.repo_file(name) == name


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("../../../../escape-Q4_K_M.gguf", "would be written outside the download folder"),
        ("sub/../../../x.gguf", "would be written outside the download folder"),
        ("..", "would be written outside the download folder"),
        ("/etc/x", "is an absolute path"),
        ("C:/Windows/x.gguf", "is an absolute path"),
        ("c:x.gguf", "is an absolute path"),
        ("..\\..\\x.gguf", "contains a backslash"),
        ("a\\b.gguf", "contains a backslash"),
        ("x\0.gguf", "contains a NUL byte"),
        ("x\n.gguf", "contains a control character"),
        ("x\x1b[2J.gguf", "contains a control character"),
        ("x\x7f.gguf", "contains a control character"),
        ("", "is empty"),
        ("./x.gguf", "has an empty or '.' path segment"),
        ("a//x.gguf", "has an empty or '.' path segment"),
        ("dir/", "has an empty or '.' path segment"),
        ("a" * 2000, "is longer than 1024 characters"),
        (None, "is not a text string"),
        (b"x.gguf", "is not a text string"),
    ],
)
def test_hostile_repo_file_names_are_refused_with_the_value_and_the_reason(name, problem):
    with pytest.raises(rp.RemotePathError) as caught:
        rp.repo_file(name)
    message = str(caught.value)
    assert problem in message and "is HF_ENDPOINT a mirror you trust?" in message
    assert message.startswith("the server gave a file named " + rp.shown(name)[:40])
    assert isinstance(caught.value, InvalidInputError) and isinstance(caught.value, ValueError)


def test_the_message_reads_as_a_sentence_and_long_values_are_cut():
    with pytest.raises(rp.RemotePathError) as caught:
        rp.repo_file("../../x.gguf")
    assert str(caught.value) == (
        "the server gave a file named '../../x.gguf', which would be written outside the download folder; "
        "refusing it (is HF_ENDPOINT a mirror you trust?)"
    )
    long = "../" * 500
    with pytest.raises(rp.RemotePathError) as caught:
        rp.repo_file(long)
    assert len(str(caught.value)) < 250 and "…" in str(caught.value)


@pytest.mark.parametrize("value", ["0123456789abcdef0123456789abcdef01234567"])
def test_a_commit_id_is_40_lowercase_hex(value):
    assert rp.commit_id(value) == value


@pytest.mark.parametrize(
    "value",
    ["../../../../victim", "main", "0123456789ABCDEF0123456789ABCDEF01234567", "0" * 39, "0" * 41, "0" * 64, None, 7],
)
def test_anything_else_is_not_a_commit_id(value):
    with pytest.raises(rp.RemotePathError, match=r"the commit id .* is not 40 lowercase hexadecimal characters"):
        rp.commit_id(value)


@pytest.mark.parametrize("value", ["main", "refs/pr/1", "v1.0", "feature/x-y", "0" * 40, "release 2"])
def test_legitimate_revisions_pass(value):
    assert rp.revision(value) == value


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("../../x", "would be written outside the cache's refs folder"),
        ("refs/../../../x", "would be written outside"),
        ("/abs", "is an absolute path"),
        ("a\\b", "contains a backslash"),
        ("a\0b", "contains a NUL byte"),
        ("a\tb", "contains a control character"),
        ("", "is empty"),
        ("refs//pr", "empty or '.'"),
        ("x" * 300, "longer than 255"),
    ],
)
def test_hostile_revisions_are_refused(value, problem):
    with pytest.raises(rp.RemotePathError, match="the revision") as caught:
        rp.revision(value)
    assert problem in str(caught.value) and str(caught.value).startswith("you gave the revision")


@pytest.mark.parametrize("value", ["org/Model-7B.Q4", "TheBloke/Llama-2-7B-GGUF", "gpt2", "a_b/c_d", "x/y"])
def test_legitimate_repo_ids_pass(value):
    assert rp.repo_id(value) == value


@pytest.mark.parametrize(
    "value",
    ["../x", "a/b/c", "a/../b", "/a", "a/", "a/b--c", "a/b..c", "a/.b", "a/b.", "-a/b", "a/b.git", "a b/c", "ä/b", ""],
)
def test_hostile_repo_ids_are_refused(value):
    with pytest.raises(rp.RemotePathError, match="the repository id"):
        rp.repo_id(value)


def test_hashes_and_blob_ids():
    sha = "AB" * 32
    assert rp.sha256_hex(sha) == sha.lower() and rp.sha256_hex(None) is None
    assert rp.blob_id("a" * 40) == "a" * 40 and rp.blob_id("b" * 64) == "b" * 64 and rp.blob_id(None) is None
    for bad in ("../../x", "a" * 63, "g" * 64):
        with pytest.raises(rp.RemotePathError, match="the sha256"):
            rp.sha256_hex(bad)
    for bad in ("../../x", "A" * 40, "a" * 41):
        with pytest.raises(rp.RemotePathError, match="the blob id"):
            rp.blob_id(bad)


@pytest.mark.parametrize("value", [None, 0, 1, rp.MAX_FILE_BYTES])
def test_sizes_in_range_pass(value):
    assert rp.file_size(value) == value


@pytest.mark.parametrize("value", [-1, 10**30, rp.MAX_FILE_BYTES + 1, 1.5, "12", True, [1]])
def test_absurd_sizes_are_refused(value):
    with pytest.raises(rp.RemotePathError, match=r"the size of 'x.gguf' as"):
        rp.file_size(value, name="x.gguf")


def test_ollama_digests_and_name_pieces():
    hex64 = "0123456789abcdef" * 4
    assert rp.ollama_digest(f"sha256:{hex64}") == hex64 == rp.ollama_digest(f"sha256-{hex64}")
    for bad in (f"sha256:{hex64}/../../x", "sha256:../../../etc/passwd", f"sha512:{hex64}", None, f"sha256:{hex64}\n"):
        with pytest.raises(rp.RemotePathError, match="Ollama's store gave the digest"):
            rp.ollama_digest(bad)
    for good in ("registry.ollama.ai", "library", "llama3.2", "latest", "Q4_K_M", "localhost:11434", "hf.co"):
        assert rp.ollama_name_piece(good) == good
    for bad in ("..", ".hidden", "a..b", "a/b", "a\\b", "a\0b", "", "ä"):
        with pytest.raises(rp.RemotePathError, match="the model name part"):
            rp.ollama_name_piece(bad)


def test_inside_resolves_the_folder_but_not_the_last_component(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    assert rp.inside(root, root / "sub" / "x") == root.resolve() / "sub" / "x"
    assert rp.inside(root, root / "new" / "deeper" / "x") == root.resolve() / "new" / "deeper" / "x"
    (root / "link").symlink_to(outside / "target")  # the last component may be a link: it is not followed
    assert rp.inside(root, root / "link") == root.resolve() / "link"
    (root / "escape").symlink_to(outside, target_is_directory=True)
    for candidate in (root / "escape" / "x", root / ".." / "outside" / "x", root / "sub" / ".." / ".." / "x"):
        with pytest.raises(rp.RemotePathError, match="leads outside"):
            rp.inside(root, candidate)
    for candidate in (root / "..", root / "a\0b"):
        with pytest.raises(rp.RemotePathError):
            rp.inside(root, candidate)


def test_inside_follows_a_linked_root(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    linked = tmp_path / "linked"
    os.symlink(real, linked)  # e.g. ~/.cache/huggingface on another disk
    assert rp.inside(linked, linked / "a" / "b") == real.resolve() / "a" / "b"
