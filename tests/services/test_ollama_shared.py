"""The workstation's one Ollama client: lent to every user for the host as it is now, the same client while
the host stays, a new one when the setting changes (the old one closed once its last user is done), all
closed by the workstation's close."""

from __future__ import annotations

import asyncio

from tests.support.fake_ollama import FakeOllama


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_pages_share_one_client_that_follows_the_host_setting():
    from app.services.paths import app_paths
    from app.services.workstation import Workstation

    async def scenario(first: FakeOllama, second: FakeOllama):
        workstation = Workstation.create(app_paths().ensure())
        workstation.update_settings(ollama_host=first.host)
        shared = workstation.ollama
        async with shared.use() as one, shared.use() as other:  # two pages at once
            assert one is other and one.host == first.host
            names = await asyncio.gather(one.list_models(), other.list_models())
            assert [[m.name for m in listed] for listed in names] == [["llama3.2:latest"]] * 2
            workstation.update_settings(ollama_host=second.host)  # while in use: the old one stays open
            assert [m.name for m in await one.list_models()] == ["llama3.2:latest"]
            async with shared.use() as new:
                assert new is not one and new.host == second.host
                assert [m.name for m in await new.list_models()] == ["qwen3:latest"]
        assert one._http.is_closed  # its last user is done
        async with shared.use() as again:
            assert again is new and not new._http.is_closed
        await workstation.close()
        assert new._http.is_closed

    with FakeOllama() as first, FakeOllama() as second:
        first.add_model("llama3.2")
        second.add_model("qwen3")
        run(scenario(first, second))
