"""The one road for settings: ``update_settings`` sets, saves (serialized, the newest wins) and tells every listener
which fields changed; nothing else writes the settings."""

from __future__ import annotations

import asyncio

import pytest

from app.core.errors import InvalidInputError
from app.core.settings import Settings, load_settings
from app.services.paths import app_paths
from app.services.settings_changes import SettingsChanged
from app.services.workstation import Workstation


@pytest.fixture
def workstation():
    return Workstation.create(app_paths().ensure())


def _recorded(workstation: Workstation) -> list[SettingsChanged]:
    events: list[SettingsChanged] = []
    workstation.subscribe(events.append)
    return events


def test_a_change_names_its_fields_and_is_saved(workstation):
    events = _recorded(workstation)
    event = workstation.update_settings(api_port=9001, theme="dark", log_level="INFO")  # INFO: unchanged
    assert event == SettingsChanged(frozenset({"api_port", "theme"})) and events == [event]
    assert event.touches("theme", "model_folders") and not event.touches("model_folders")
    on_disk = load_settings(workstation.paths.settings_file)  # no loop running: written at once
    assert on_disk.api_port == 9001 and on_disk.theme == "dark"


def test_the_same_values_change_nothing_and_tell_no_one(workstation):
    events = _recorded(workstation)
    assert workstation.update_settings(theme=workstation.settings.theme) is None
    assert events == [] and not workstation.paths.settings_file.exists()


def test_an_unknown_field_is_refused_before_anything_is_set(workstation):
    events = _recorded(workstation)
    with pytest.raises(InvalidInputError, match="no_such_setting"):
        workstation.update_settings(api_port=9001, no_such_setting=1)
    assert workstation.settings.api_port == Settings().api_port and events == []


def test_values_are_copied_so_the_caller_keeps_its_own(workstation):
    folders = ["/models/a"]
    workstation.update_settings(model_folders=folders)
    folders.append("/models/b")
    assert workstation.settings.model_folders == ["/models/a"]


def test_replacing_the_whole_settings_goes_the_same_road(workstation):
    events = _recorded(workstation)
    wanted = Settings(model_folders=["/srv/gguf"], ollama_host="http://other:11434")
    workstation.replace_settings(wanted)
    assert [e.names for e in events] == [frozenset({"model_folders", "ollama_host"})]
    assert workstation.settings == wanted


def test_the_engines_follow_a_new_ollama_host(workstation):
    workstation.update_settings(ollama_host="http://gpu-box:11434")
    assert workstation.host._ollama_host == "http://gpu-box:11434"


def test_a_used_model_comes_first_in_the_recent_ones(workstation):
    workstation.update_settings(recent_models=["/m/a.gguf", "/m/b.gguf"])
    event = workstation.remember_model("/m/b.gguf")
    assert event is not None and event.names == {"recent_models"}
    assert workstation.settings.recent_models == ["/m/b.gguf", "/m/a.gguf"]
    assert workstation.remember_model("/m/b.gguf") is None  # already first: nothing changes


def test_saves_on_the_loop_are_serialized_and_the_newest_wins(workstation):
    async def scenario():
        for port in range(9000, 9020):
            workstation.update_settings(api_port=port)
        await workstation.settings_saved()
        assert load_settings(workstation.paths.settings_file).api_port == 9019
        await workstation.close()

    asyncio.run(scenario())


def test_an_unreadable_file_is_not_overwritten_by_a_change(workstation):
    broken = b'{"version": 1, "load": '
    workstation.paths.settings_file.write_bytes(broken)
    unreadable = Workstation.create(workstation.paths)
    assert unreadable.settings_problem
    events = _recorded(unreadable)
    unreadable.update_settings(theme="dark")  # used for this session, told to listeners …
    assert unreadable.settings.theme == "dark" and len(events) == 1
    assert workstation.paths.settings_file.read_bytes() == broken  # … but the user's file stays as it is
