"""Download states and library entry kinds are StrEnums: files and JSON keep the plain strings they always had,
and what is read back is the enum again."""

from __future__ import annotations

import json

import pytest

from app.services.downloads.jobs import DONE, DownloadJob, JobFile, JobState
from app.services.library.index import EntryKind, EntrySource, LibraryEntry


def _job(state: JobState = DONE) -> DownloadJob:
    return DownloadJob("org/Tiny-GGUF", "a" * 40, [JobFile("tiny.gguf", 10)], state=state)


def test_a_job_state_is_stored_as_its_plain_string_and_read_back_as_the_enum():
    stored = json.loads(json.dumps(_job().to_dict()))
    assert stored["state"] == "done" and type(stored["state"]) is str
    loaded = DownloadJob.from_dict(stored)
    assert loaded.state is JobState.DONE


def test_an_unknown_state_in_the_queue_file_is_refused():
    stored = {**_job().to_dict(), "state": "exploded"}
    with pytest.raises(ValueError, match="unknown download state"):
        DownloadJob.from_dict(stored)


def test_a_library_entry_shows_plain_kind_and_source_in_json():
    entry = LibraryEntry("/m/tiny.gguf", "tiny", EntryKind.GGUF, EntrySource.HF_CACHE)
    data = json.loads(json.dumps(entry.to_dict()))
    assert (data["kind"], data["source"], data["backend"]) == ("gguf", "hf-cache", "llama.cpp")
    assert LibraryEntry("/m/x", "x", EntryKind.HF, EntrySource.FOLDER).backend == "vLLM"
