"""The per-model settings store: round trip, moved files, bad files, owner-only writes, the starter's preset."""

from __future__ import annotations

import json
import os
import stat

import pytest

from app.core.params import LoadParams, SamplingParams
from app.core.settings import Settings
from app.services import starter_model
from app.services.model_settings import FILE_NAME, ModelSettings, ModelSettingsStore


def _model(folder, name="model.gguf", size=100):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(b"G" * size)
    return str(path)


def _store(tmp_path, defaults=None):
    settings = defaults or Settings()
    return ModelSettingsStore(tmp_path / "data" / FILE_NAME, lambda: settings)


def test_round_trip_through_the_file(tmp_path):
    entry = _model(tmp_path / "models")
    chosen = ModelSettings(LoadParams(n_ctx=8192), SamplingParams(temperature=0.2, stop=("END",)), "terse", True)
    _store(tmp_path).set(entry, chosen)
    reopened = _store(tmp_path)
    assert reopened.get(entry) == chosen
    assert reopened.effective_load(entry).n_ctx == 8192
    assert reopened.effective_sampling(entry).stop == ("END",)
    assert reopened.problem is None


def test_unset_parts_follow_the_global_defaults(tmp_path):
    entry = _model(tmp_path / "models")
    defaults = Settings(load=LoadParams(n_ctx=2048), sampling=SamplingParams(temperature=0.9))
    store = _store(tmp_path, defaults)
    assert store.get(entry) == ModelSettings() and store.saved(entry) is None
    store.update(entry, sampling=SamplingParams(temperature=0.1))
    assert store.effective_load(entry).n_ctx == 2048  # not set for the model: the default
    assert store.effective_sampling(entry).temperature == pytest.approx(0.1)
    defaults.load = LoadParams(n_ctx=1024)  # the defaults change later: the model follows
    assert store.effective_load(entry).n_ctx == 1024


def test_a_moved_file_keeps_its_settings_and_another_file_does_not_get_them(tmp_path):
    entry = _model(tmp_path / "a")
    _store(tmp_path).set(entry, ModelSettings(sampling=SamplingParams(top_k=7)))
    moved = tmp_path / "b" / "model.gguf"
    moved.parent.mkdir()
    os.replace(entry, moved)
    store = _store(tmp_path)
    assert store.effective_sampling(str(moved)).top_k == 7
    other_size = _model(tmp_path / "c", size=101)
    other_name = _model(tmp_path / "d", name="other.gguf")
    assert store.saved(other_size) is None and store.saved(other_name) is None
    store.update(str(moved), preset="p")  # saving again records the new path
    saved = json.loads((tmp_path / "data" / FILE_NAME).read_text())["models"]
    assert [m["entry"] for m in saved] == [str(moved)]


def test_engine_entries_are_their_own_keys(tmp_path):
    store = _store(tmp_path)
    store.set("ollama:llama3.2:latest", ModelSettings(sampling=SamplingParams(seed=3)))
    assert store.effective_sampling("ollama:llama3.2:latest").seed == 3
    assert store.saved("vllm:llama3.2:latest") is None


def test_forget_goes_back_to_the_defaults(tmp_path):
    entry = _model(tmp_path / "models")
    store = _store(tmp_path)
    store.set(entry, ModelSettings(preset="x"))
    store.forget(entry)
    assert _store(tmp_path).saved(entry) is None


def test_the_file_is_owner_only_and_no_temporary_file_is_left(tmp_path):
    entry = _model(tmp_path / "models")
    _store(tmp_path).set(entry, ModelSettings(preset="x"))
    path = tmp_path / "data" / FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == [FILE_NAME]


@pytest.mark.parametrize(
    "content",
    [
        "{broken",
        "[" * 100_000,  # nested too deeply
        '{"models": 3}',
        '{"version": 99, "models": []}',
        '{"models": [{"entry": "x.gguf", "size": "big", "settings": {}}]}',
        '{"models": [{"entry": "x.gguf", "settings": {"sampling": {"temperature": "hot"}}}]}',
        '{"models": [{"entry": "x.gguf", "settings": {"load": 5}}]}',
    ],
)
def test_a_bad_file_gives_defaults_a_clear_message_and_is_left_alone(tmp_path, content):
    entry = _model(tmp_path / "models")
    path = tmp_path / "data" / FILE_NAME
    path.parent.mkdir()
    path.write_text(content)
    store = _store(tmp_path)
    assert store.get(entry) == ModelSettings()
    assert store.effective_load(entry) == LoadParams()
    assert "could not be read" in store.problem and FILE_NAME in store.problem
    store.set(entry, ModelSettings(preset="kept for the session"))
    assert store.get(entry).preset == "kept for the session"
    assert path.read_text() == content  # never written over


def test_a_file_that_is_a_folder_or_too_large_is_a_problem_too(tmp_path):
    (tmp_path / "data" / FILE_NAME).mkdir(parents=True)
    store = _store(tmp_path)
    assert store.get("ollama:x") == ModelSettings() and "could not be read" in store.problem


def test_the_starter_model_defaults_to_its_shipped_preset(tmp_path):
    entry = str(tmp_path / "anywhere" / starter_model.FILE_NAME)
    store = _store(tmp_path)
    settings = store.get(entry)
    assert settings.preset == starter_model.PRESET_NAME
    assert settings.load.chat_format == "text-continuation"
    sampling = store.effective_sampling(entry)
    assert sampling.max_tokens == 200 and "\n\n" in sampling.stop and sampling.repeat_penalty == pytest.approx(1.15)
    store.update(entry, sampling=SamplingParams(temperature=0.3))  # the user's own choice wins
    assert _store(tmp_path).effective_sampling(entry).temperature == pytest.approx(0.3)
