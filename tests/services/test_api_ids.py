"""Model ids stay: an id once served is the model's while it is there — a folder added with a same-named GGUF
leaves the starter's README id on the starter and gives the newcomer its file's stem; a restart keeps the ids
under the server's state_dir (a corrupt file is ignored, with a log line); models seen together take ids in one
fixed order. ``GET /v1/models`` lists every model the server can load, each with LM Studio's ``state``."""

from __future__ import annotations

import json
import logging
import os

import pytest

from app.services import starter_model
from app.services.api.catalog import Candidate, assign_ids
from app.services.api.config import ServerConfig
from app.services.api.model_ids import IDS_FILE, read_ids
from app.services.engines.entries import EngineKind
from app.services.library.index import LibraryRoots, ModelLibrary
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(300)

STARTER_ID = "Gemma 3 270M"  # the README's id for the starter model
OLD_MTIME = 1_000_000_000  # 2001: older than any file written now


# --- the rule -----------------------------------------------------------------------------------------------------
def test_a_served_id_stays_and_the_newcomer_is_told_apart():
    first = Candidate(EngineKind.LLAMACPP, "/models/gemma.gguf", STARTER_ID, created=2_000_000_000)
    newcomer = Candidate(EngineKind.LLAMACPP, "/extra/gemma-copy.gguf", STARTER_ID, created=OLD_MTIME)
    served = assign_ids([first])
    assert [m.id for m in served] == [STARTER_ID]
    remembered = {m.entry: m.id for m in served}
    assert {m.id: m.entry for m in assign_ids([newcomer, first], remembered)} == {
        STARTER_ID: first.entry, "gemma-copy": newcomer.entry,
    }  # fmt: skip
    together = {m.id: m.entry for m in assign_ids([first, newcomer])}
    assert together[STARTER_ID] == newcomer.entry  # seen together, nothing served yet: the older file keeps it


def test_an_engine_model_arriving_later_gets_its_prefix_and_both_prefixes_resolve():
    gguf = Candidate(EngineKind.LLAMACPP, "/store/blob.gguf", "qwen3:latest")
    served = {m.entry: m.id for m in assign_ids([gguf])}
    ollama = Candidate(EngineKind.OLLAMA, "ollama:qwen3:latest", "qwen3:latest")
    models = {m.id: m for m in assign_ids([gguf, ollama], served)}
    assert models["qwen3:latest"].entry == gguf.entry and models["ollama/qwen3:latest"].entry == ollama.entry
    assert "llamacpp/qwen3:latest" in models["qwen3:latest"].aliases
    assert "qwen3" in models["ollama/qwen3:latest"].aliases


def test_an_absent_model_holds_no_id():
    remembered = {"/gone/model.gguf": "Solo"}
    assert assign_ids([Candidate(EngineKind.LLAMACPP, "/new/solo.gguf", "Solo")], remembered)[0].id == "Solo"


@pytest.mark.parametrize("text", ["{not json", '{"format": 1, "ids": {"/m.gguf": 5}}', '["a"]', '{"format": 99}'])
def test_an_ids_file_that_cannot_be_read_is_ignored_with_a_log_line(tmp_path, caplog, text):
    (tmp_path / IDS_FILE).write_text(text)
    with caplog.at_level(logging.WARNING, logger="app.services.api"):
        assert read_ids(tmp_path / IDS_FILE) == {}
    assert any("ignoring the remembered model ids" in r.getMessage() for r in caplog.records)


# --- the real server ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def starter_folder(tmp_path_factory):
    if not starter_model.package_installed():
        pytest.skip(f"the starter model's package ({starter_model.PACKAGE}) is not installed")
    folder = tmp_path_factory.mktemp("starter")
    starter_model.ensure_starter_model(folder)
    return folder


def twin_folder(parent, name="gemma-twin"):
    """A folder with a GGUF named as the starter is (``general.name`` "Gemma 3 270m"), older than it."""
    folder = parent / f"{name}-folder"
    folder.mkdir()
    path = write_tiny_gguf(folder / f"{name}.gguf", name="Gemma 3 270m")
    os.utime(path, (OLD_MTIME, OLD_MTIME))
    return folder


def add_folder(api, folder):
    async def add() -> None:
        api.server.catalog.add_library(ModelLibrary(LibraryRoots(folders=(folder,))))

    api.run(add())


def listing(api):
    with api.http() as http:
        return {m["id"]: m for m in http.get("/v1/models").json()["data"]}


def serving(api) -> str | None:
    """The llama.cpp model the last request ran on: the parallel engine's (the default), else the single worker's."""
    loaded = api.host.parallel.loaded or api.host.loaded(EngineKind.LLAMACPP)
    return loaded.entry if loaded is not None else None


def test_the_starter_keeps_its_id_when_a_folder_with_its_namesake_is_added(starter_folder, tmp_path):
    starter = str(starter_folder / starter_model.FILE_NAME)
    with ApiHarness(starter_folder, ServerConfig(port=0)) as api:
        client = api.openai()
        assert {m.id: m.owned_by for m in client.models.list()} == {STARTER_ID: "llamacpp"}
        add_folder(api, twin_folder(tmp_path))
        models = listing(api)
        assert set(models) == {STARTER_ID, "gemma-twin"}  # the original keeps the name, the newcomer its stem
        reply = client.completions.create(model=STARTER_ID, prompt="The capital of France is", max_tokens=2)
        assert reply.model == STARTER_ID and serving(api) == starter
        twin = client.completions.create(model="gemma-twin", prompt="x", max_tokens=2)
        assert twin.model == "gemma-twin" and (serving(api) or "").endswith("gemma-twin.gguf")


def test_models_lists_every_loadable_model_with_its_state(tmp_path):
    write_tiny_gguf(tmp_path / "first.gguf", name="first")
    write_tiny_gguf(tmp_path / "second.gguf", name="second", context_length=4096)
    with ApiHarness(tmp_path, ServerConfig(port=0)) as api:
        client = api.openai()
        before = {m.id: m for m in client.models.list()}
        assert before["second"].max_context_length == 4096  # the trained context, as LM Studio lists it
        assert {i: m.state for i, m in before.items()} == {"first": "not-loaded", "second": "not-loaded"}
        assert all(m.object == "model" and m.owned_by == "llamacpp" and m.created > 0 for m in before.values())
        client.chat.completions.create(model="first", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
        assert {m.id: m.state for m in client.models.list()} == {"first": "loaded", "second": "not-loaded"}
        one = client.models.retrieve("second")
        assert one.id == "second" and one.state == "not-loaded"


def test_ids_are_remembered_across_restarts_in_the_state_dir(tmp_path):
    state = tmp_path / "state"
    original = tmp_path / "original"
    original.mkdir()
    kept = write_tiny_gguf(original / "gemma-kept.gguf", name="Gemma 3 270m")
    with ApiHarness(original, ServerConfig(port=0, state_dir=state)) as api:
        assert listing(api)[STARTER_ID]["owned_by"] == "llamacpp"
    assert read_ids(state / IDS_FILE) == {str(kept): STARTER_ID}

    twin = twin_folder(tmp_path)  # older than the original: seen together afresh, it would take the name
    with ApiHarness(twin, ServerConfig(port=0, state_dir=state)) as api:
        add_folder(api, original)
        assert set(listing(api)) == {STARTER_ID, "gemma-twin"}
        assert api.run(api.server.catalog.resolve(STARTER_ID)).entry == str(kept)
    with ApiHarness(twin, ServerConfig(port=0)) as fresh:  # no state_dir: nothing remembered
        add_folder(fresh, original)
        assert fresh.run(fresh.server.catalog.resolve(STARTER_ID)).entry.endswith("gemma-twin.gguf")


def test_a_corrupt_ids_file_is_ignored_and_rewritten(tmp_path, caplog):
    state = tmp_path / "state"
    state.mkdir()
    (state / IDS_FILE).write_text("{half a file")
    write_tiny_gguf(tmp_path / "solo.gguf", name="solo")
    with (
        caplog.at_level(logging.WARNING, logger="app.services.api"),
        ApiHarness(tmp_path, ServerConfig(port=0, state_dir=state)) as api,
    ):
        assert set(listing(api)) == {"solo"}
    assert any("ignoring the remembered model ids" in r.getMessage() for r in caplog.records)
    assert json.loads((state / IDS_FILE).read_text())["ids"] == {str(tmp_path / "solo.gguf"): "solo"}
