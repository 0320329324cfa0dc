"""Stored responses: ``store`` (true by default), ``previous_response_id`` rebuilding the conversation, ``GET`` /
``DELETE /v1/responses/{id}`` and ``input_items`` with the official ``openai`` SDK against the real server and the
real llama.cpp worker; the files in the data folder (owner-only, surviving a restart, bounded, a broken one never
breaking the server) and the store's bounds, on real files."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time

import openai
import pytest

from app.services.api.config import ServerConfig
from app.services.api.errors import ApiError
from app.services.api.responses_store import ResponseStore
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(180)

ASK = {"model": "tiny-chat", "max_output_tokens": 3}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("responses-store-models")
    write_tiny_gguf(folder / "tiny-chat.gguf", name="tiny-chat")
    return folder


@pytest.fixture(scope="module")
def api(models, tmp_path_factory):
    with ApiHarness(models, ServerConfig(port=0)) as harness:  # no data folder: stored in memory
        yield harness


def _not_found(call) -> openai.NotFoundError:
    with pytest.raises(openai.NotFoundError) as caught:
        call()
    return caught.value


# --- retrieve, delete, input items ------------------------------------------------------------------------------
def test_a_response_is_stored_by_default_and_retrieved_as_it_was_sent(api):
    client = api.openai()
    made = client.responses.create(**ASK, input="hello there")
    assert client.responses.retrieve(made.id).model_dump() == made.model_dump()
    gets = [r for r in api.finished_records("responses") if r.status == 200]
    assert len(gets) >= 2 and not gets[-1].model  # the GET is logged, with no model to load


def test_a_streamed_response_is_stored_as_its_last_event_says(api):
    client = api.openai()
    events = list(client.responses.create(**ASK, input="hi", stream=True))
    final = events[-1].response
    assert client.responses.retrieve(final.id).model_dump() == final.model_dump()


def test_delete_answers_openais_deletion_object_then_the_response_is_gone(api):
    made = api.openai().responses.create(**ASK, input="hi")
    deleted = api.http().delete(f"/v1/responses/{made.id}")
    assert deleted.status_code == 200 and deleted.json() == {"id": made.id, "object": "response", "deleted": True}
    gone = _not_found(lambda: api.openai().responses.retrieve(made.id))
    assert gone.body["param"] == "response_id" and made.id in gone.message
    assert _not_found(lambda: api.openai().responses.delete(made.id)).status_code == 404
    again = _not_found(lambda: api.openai().responses.input_items.list(made.id))
    assert again.status_code == 404


def test_store_false_is_never_kept(api):
    client = api.openai()
    made = client.responses.create(**ASK, input="hi", store=False)
    assert made.store is False
    _not_found(lambda: client.responses.retrieve(made.id))
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(**ASK, input="and?", previous_response_id=made.id)
    assert caught.value.code == "previous_response_not_found" and caught.value.body["param"] == "previous_response_id"


def test_an_unknown_or_malformed_id_is_a_404_in_openais_shape(api):
    for path in ("/v1/responses/resp_doesnotexist", "/v1/responses/not-an-id", "/v1/responses/resp_x.json"):
        response = api.http().get(path)
        assert response.status_code == 404 and response.json()["error"]["type"] == "invalid_request_error", path
    assert api.http().get("/v1/responses/resp_doesnotexist?stream=true").status_code == 400


def test_input_items_list_the_input_newest_first_in_pages(api):
    client = api.openai()
    made = client.responses.create(**ASK, input=[
        {"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"}])  # fmt: skip
    newest = client.responses.input_items.list(made.id)
    assert [i.content[0].text for i in newest.data] == ["three", "two", "one"] and not newest.has_more
    first = client.responses.input_items.list(made.id, order="asc", limit=2)
    assert [i.content[0].text for i in first.data] == ["one", "two"] and first.has_more
    rest = client.responses.input_items.list(made.id, order="asc", after=first.last_id)
    assert [i.content[0].text for i in rest.data] == ["three"] and not rest.has_more
    assert all(i.id.startswith("msg_") for i in newest.data)
    for query in ("order=sideways", "limit=0", "limit=101", "after=msg_nope"):
        assert api.http().get(f"/v1/responses/{made.id}/input_items?{query}").status_code == 400, query


# --- previous_response_id -----------------------------------------------------------------------------------------
def test_a_chain_of_responses_is_the_whole_conversation_without_old_instructions(api):
    client = api.openai()
    one = client.responses.create(**ASK, instructions="Be terse.", input="hi")
    two = client.responses.create(**ASK, previous_response_id=one.id, input="and?")
    three = client.responses.create(**ASK, previous_response_id=two.id, input="so?")
    whole = client.responses.create(**ASK, store=False, input=[
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": one.output_text},
        {"role": "user", "content": "and?"}, {"role": "assistant", "content": two.output_text},
        {"role": "user", "content": "so?"}])  # fmt: skip
    assert three.usage.input_tokens == whole.usage.input_tokens  # instructions are not carried over
    assert (two.previous_response_id, three.previous_response_id) == (one.id, two.id)
    with_instructions = client.responses.create(**ASK, previous_response_id=one.id, input="and?",
                                                instructions="Be terse.")  # fmt: skip
    assert with_instructions.usage.input_tokens > two.usage.input_tokens


def test_an_unknown_previous_response_is_openais_400(api):
    with pytest.raises(openai.BadRequestError) as caught:
        api.openai().responses.create(**ASK, input="hi", previous_response_id="resp_doesnotexist")
    error = caught.value
    assert error.code == "previous_response_not_found" and error.body["param"] == "previous_response_id"
    assert "resp_doesnotexist" in error.message


def test_a_chain_whose_first_response_was_deleted_says_which_is_missing(api):
    client = api.openai()
    one = client.responses.create(**ASK, input="hi")
    two = client.responses.create(**ASK, previous_response_id=one.id, input="and?")
    client.responses.delete(one.id)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(**ASK, previous_response_id=two.id, input="so?")
    assert one.id in caught.value.message and caught.value.code == "previous_response_not_found"


# --- the data folder ------------------------------------------------------------------------------------------------
def test_stored_responses_live_in_the_data_folder_owner_only_and_survive_a_restart(models, tmp_path):
    config = ServerConfig(port=0, state_dir=tmp_path)
    with ApiHarness(models, config) as first:
        made = first.openai().responses.create(**ASK, input="hi")
        path = tmp_path / "responses" / f"{made.id}.json"
        assert first.wait_for(path.exists)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) & 0o077 == 0
    with ApiHarness(models, config) as second:
        client = second.openai()
        assert client.responses.retrieve(made.id).model_dump() == made.model_dump()
        follow = client.responses.create(**ASK, previous_response_id=made.id, input="and?")
        assert follow.previous_response_id == made.id
        client.responses.delete(made.id)
        assert second.wait_for(lambda: not path.exists())


def test_a_broken_stored_file_is_not_stored_and_the_server_goes_on(models, tmp_path, caplog):
    folder = tmp_path / "responses"
    folder.mkdir()
    (folder / "resp_broken.json").write_text("{not json")
    (folder / "resp_other.json").write_text(json.dumps({"response": {"id": "resp_someone_else"}, "input": []}))
    (folder / "resp_items.json").write_text(json.dumps({"response": {"id": "resp_items", "output": [7]}, "input": []}))
    with ApiHarness(models, ServerConfig(port=0, state_dir=tmp_path)) as api:
        for broken in ("resp_broken", "resp_other", "resp_items"):
            assert api.http().get(f"/v1/responses/{broken}").status_code == 404
        with pytest.raises(openai.BadRequestError):
            api.openai().responses.create(**ASK, input="hi", previous_response_id="resp_broken")
        made = api.openai().responses.create(**ASK, input="hi")  # the tiny model may end before its 3 tokens
        assert made.status in {"completed", "incomplete"} and made.output
        assert api.openai().responses.retrieve(made.id).id == made.id
    assert "taken as not stored" in caplog.text


def test_a_data_folder_that_cannot_be_written_still_serves_the_session(models, tmp_path, caplog):
    (tmp_path / "responses").write_text("a file where the folder would be")
    with ApiHarness(models, ServerConfig(port=0, state_dir=tmp_path)) as api:
        made = api.openai().responses.create(**ASK, input="hi")
        assert api.wait_for(lambda: "could not store response" in caplog.text)
        assert api.openai().responses.retrieve(made.id).id == made.id  # still held in memory


# --- the store's bounds, on real files -------------------------------------------------------------------------
def _response(number: int, created_at: float | None = None) -> dict:
    return {"id": f"resp_{number:04d}", "object": "response", "created_at": created_at or time.time(), "output": []}


def test_the_disk_store_keeps_the_newest_and_drops_the_oldest(tmp_path):
    async def run() -> list:
        store = ResponseStore(tmp_path, keep=3)
        for number in range(5):
            store.put(_response(number), [])
            await store.flush()
            at = time.time() - 100 + number  # distinct times, oldest first
            os.utime(store.folder / f"resp_{number:04d}.json", (at, at))
        store.put(_response(5), [])
        await store.flush()
        kept = sorted(p.stem for p in store.folder.glob("*.json"))
        found = [await store.get(f"resp_{n:04d}") for n in range(6)]
        return [kept, [f is not None for f in found]]

    kept, found = asyncio.run(run())
    assert kept == ["resp_0003", "resp_0004", "resp_0005"]
    assert found == [False, False, False, True, True, True]


def test_the_stores_forget_what_is_older_than_they_keep(tmp_path):
    async def run(folder) -> tuple[bool, bool]:
        now = [time.time()]
        store = ResponseStore(folder, max_age_s=60, clock=lambda: now[0])
        store.put(_response(1, now[0]), [])
        await store.flush()
        fresh = await store.get("resp_0001") is not None
        now[0] += 61
        return fresh, await store.get("resp_0001") is not None

    assert asyncio.run(run(tmp_path)) == (True, False)
    assert asyncio.run(run(None)) == (True, False)


def test_a_write_drops_the_files_older_than_the_store_keeps(tmp_path):
    stale = tmp_path / "responses" / "resp_stale.json"
    stale.parent.mkdir()
    stale.write_text("{}")
    old = time.time() - 31 * 24 * 3600
    os.utime(stale, (old, old))

    async def run() -> None:
        store = ResponseStore(tmp_path)
        store.put(_response(1), [])
        await store.flush()

    asyncio.run(run())
    assert not stale.exists() and (tmp_path / "responses" / "resp_0001.json").exists()


def test_the_memory_store_holds_a_bounded_number(tmp_path):
    async def run() -> list[bool]:
        store = ResponseStore(None, keep=2)
        for number in range(3):
            store.put(_response(number), [])
        return [await store.get(f"resp_{n:04d}") is not None for n in range(3)]

    assert asyncio.run(run()) == [False, True, True]


def test_history_walks_the_chain_oldest_first_and_names_a_missing_link(tmp_path):
    async def run() -> tuple[list, str]:
        store = ResponseStore(tmp_path)
        user = {"type": "message", "id": "msg_1", "role": "user", "status": "completed",
                "content": [{"type": "input_text", "text": "hi"}]}  # fmt: skip
        first = {**_response(1), "output": [{"type": "message", "id": "msg_2", "role": "assistant",
                                             "status": "completed", "content": [{"type": "output_text", "text": "yo",
                                                                                  "annotations": []}]}]}  # fmt: skip
        store.put(first, [user])
        store.put({**_response(2), "previous_response_id": "resp_0001"}, [{**user, "id": "msg_3"}])
        await store.flush()
        items = await store.history("resp_0002")
        await store.delete("resp_0001")
        try:
            await store.history("resp_0002")
        except ApiError as exc:
            return [i["id"] for i in items], exc.message
        return [i["id"] for i in items], ""

    ids, missing = asyncio.run(run())
    assert ids == ["msg_1", "msg_2", "msg_3"]
    assert "resp_0001" in missing and "resp_0002" in missing


def test_the_workstations_server_keeps_them_in_the_apps_data_folder(models):
    """Started from the settings (the window) or with ``serve``'s own config, ``workstation.api`` stores responses
    under the app's data folder."""
    import openai as sdk

    from app.services.paths import app_paths
    from app.services.workstation import Workstation

    async def scenario() -> list[bool]:
        workstation = Workstation.create(app_paths().ensure())
        workstation.update_settings(api_port=0, model_folders=[str(models)])
        found = []
        try:
            for config in (None, ServerConfig(port=0)):
                url = await workstation.api.start(config)
                async with sdk.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0) as client:
                    made = await client.responses.create(**ASK, input="hi")
                path = workstation.paths.data_dir / "responses" / f"{made.id}.json"
                await until(path.exists, 30)
                found.append(path.exists())
                await workstation.api.stop()
        finally:
            await workstation.close()
        return found

    assert asyncio.run(scenario()) == [True, True]
