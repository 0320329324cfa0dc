"""``workstation.api``, the API server as a workstation service, over real HTTP with the official ``openai`` SDK: its
catalog follows the library (a folder added in the settings, a download finished: listed by the running server,
no restart), it starts from the settings, says "restart to apply" when they change while it serves, keeps its
request log across a restart, autostarts only when asked, and a failed start is a state with its reason."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import openai
import pytest

from app.core.errors import InvalidInputError
from app.services.api.events import ApiEvent, ApiRequestLogged, ApiState, ApiStateChanged
from app.services.library.events import LibraryChanged, LibraryEvent
from app.services.paths import app_paths
from app.services.workstation import Workstation
from tests.support.gguf_factory import write_tiny_gguf
from tests.support.hf_server import HubServer, Repo, use_hub
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(120)


def _run(scenario: Callable[[Workstation], Awaitable[None]]) -> None:
    async def main() -> None:
        workstation = Workstation.create(app_paths().ensure())
        try:
            await scenario(workstation)
        finally:
            await workstation.close()

    asyncio.run(main())


async def _ids(url: str) -> list[str]:
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="not-needed") as client:
        return [model.id async for model in client.models.list()]


def _scans_with(workstation: Workstation, path: Path) -> list[LibraryChanged]:
    """The library scans that list ``path``, as they come."""
    found: list[LibraryChanged] = []

    def heard(event: LibraryEvent) -> None:
        if isinstance(event, LibraryChanged) and any(e.path == str(path) for e in event.scan.entries):
            found.append(event)

    workstation.library.subscribe(heard)
    return found


def test_a_folder_added_in_the_settings_is_served_at_once_by_the_running_server(tmp_path):
    folder = tmp_path / "more-models"
    folder.mkdir()
    gguf = write_tiny_gguf(folder / "added.gguf", name="added-model")

    async def scenario(workstation: Workstation) -> None:
        workstation.update_settings(api_port=0)
        url = await workstation.api.start()
        assert "added-model" not in await _ids(url)
        scans = _scans_with(workstation, gguf)
        workstation.update_settings(model_folders=[str(folder)])  # as the Settings or the Library page does
        await until(lambda: scans, 30)
        assert "added-model" in await _ids(url)  # the same server, listed at once (not after its cache expires)
        assert workstation.api.snapshot().url == url

    _run(scenario)


def test_a_finished_download_is_served_by_the_running_server(tmp_path, monkeypatch):
    from app.services.downloads.hub import HubService

    source = write_tiny_gguf(tmp_path / "fetched.gguf", name="downloaded-model")
    with HubServer() as hub:
        use_hub(hub, monkeypatch, tmp_path)
        hub.add(Repo("org/Tiny-GGUF", {"fetched-Q8_0.gguf": source.read_bytes()}, tags=["gguf"]))
        service = HubService()
        job = service.plan_download(service.repo_detail("org/Tiny-GGUF", with_card=False), files=["fetched-Q8_0.gguf"])

        async def scenario(workstation: Workstation) -> None:
            url = await workstation.api.start(_config())
            assert "downloaded-model" not in await _ids(url)  # listed once: the library is followed from now on
            finished: list[LibraryChanged] = []
            workstation.library.subscribe(
                lambda e: finished.append(e) if isinstance(e, LibraryChanged) and _has(e, "downloaded-model") else None
            )
            await workstation.downloads.start()
            await workstation.downloads.add(job)
            await until(lambda: finished, 60)
            assert "downloaded-model" in await _ids(url)

        _run(scenario)


def test_settings_changed_while_serving_apply_on_the_next_start_and_the_log_survives_it():
    async def scenario(workstation: Workstation) -> None:
        api = workstation.api
        events: list[ApiEvent] = []
        api.subscribe(events.append)
        workstation.update_settings(api_port=0, api_key="sk-first")
        url = await api.start()
        assert [e.snapshot.state for e in events if isinstance(e, ApiStateChanged)] == ["starting", "serving"]
        assert api.api_key == "sk-first" and api.snapshot().api_key == "sk-first"
        assert "sk-first" not in repr(api.snapshot())  # a snapshot in a log line shows no key
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-first") as client:
            await client.models.list()
        await until(lambda: api.snapshot().requests == 1, 10)
        assert any(isinstance(e, ApiRequestLogged) and e.requests == 1 for e in events)

        workstation.update_settings(api_key="sk-second")
        snapshot = api.snapshot()
        assert snapshot.serving and snapshot.restart_to_apply and snapshot.api_key == "sk-first"
        assert isinstance(events[-1], ApiStateChanged) and events[-1].snapshot.restart_to_apply
        workstation.update_settings(api_key="sk-first")  # back as it runs: nothing to apply
        assert not api.snapshot().restart_to_apply

        workstation.update_settings(api_key="sk-second")
        await api.stop()
        assert api.snapshot().state is ApiState.STOPPED and api.url is None and api.api_key is None
        url = await api.start()
        assert api.api_key == "sk-second" and not api.snapshot().restart_to_apply
        snapshot = api.snapshot()
        assert snapshot.requests == 0 and [r.endpoint for r in snapshot.records] == ["models"]  # the log is kept

    _run(scenario)


def test_autostart_only_when_the_settings_say_so_and_a_failure_is_a_state_with_its_reason():
    taken = socket.create_server(("127.0.0.1", 0))

    async def scenario(workstation: Workstation) -> None:
        api = workstation.api
        await api.autostart()
        assert api.state is ApiState.STOPPED  # api_autostart is off by default
        workstation.update_settings(api_autostart=True, api_port=taken.getsockname()[1])
        await api.autostart()  # a port in use: not raised, kept in the snapshot
        snapshot = api.snapshot()
        assert snapshot.state is ApiState.FAILED and "already in use" in (snapshot.error or "")
        with pytest.raises(InvalidInputError, match="API key"):  # start() raises, for serve and the page
            await api.start(_config(host="0.0.0.0"))
        workstation.update_settings(api_port=0)
        await api.stop()  # from FAILED: stopped, the reason cleared
        assert api.snapshot().state is ApiState.STOPPED and api.snapshot().error is None
        await api.autostart()
        assert api.snapshot().serving

    try:
        _run(scenario)
    finally:
        taken.close()


def _config(**changes: object):
    from app.services.api.config import ServerConfig

    return ServerConfig(**{"port": 0, **changes})  # type: ignore[arg-type]


def _has(event: LibraryChanged, name: str) -> bool:
    return any(entry.name == name for entry in event.scan.entries)


def test_a_server_that_dies_says_so_and_starts_again():
    async def scenario(workstation: Workstation) -> None:
        workstation.update_settings(api_port=0)
        await workstation.api.start()
        states: list[ApiState] = []
        workstation.api.subscribe(lambda e: states.append(e.snapshot.state) if isinstance(e, ApiStateChanged) else None)
        workstation.api.server._server.should_exit = True  # uvicorn leaves its loop, as on a fatal error
        await until(lambda: ApiState.FAILED in states, 30)
        snapshot = workstation.api.snapshot()
        assert snapshot.state is ApiState.FAILED and snapshot.error and "Start it again" in snapshot.error
        url = await workstation.api.start()  # the dead server's socket was released
        assert workstation.api.state is ApiState.SERVING and await _ids(url) is not None

    _run(scenario)
