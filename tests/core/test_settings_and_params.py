from __future__ import annotations

import json
import os

import pytest

from app.core.chat.conversation import Conversation, Message, MessageStatus, ReplyStats, Role, title_from
from app.core.chat.formats import choose_chat_format
from app.core.params import LoadParams, SamplingParams
from app.core.settings import (
    MAX_SETTINGS_BYTES,
    SETTINGS_VERSION,
    Settings,
    SettingsError,
    load_settings,
    save_settings,
)


def test_settings_round_trip(tmp_path):
    settings = Settings(
        model_folders=["/models"],
        load=LoadParams(n_ctx=8192, n_gpu_layers=12, flash_attn=True, type_k="q8_0", type_v="q8_0"),
        sampling=SamplingParams(temperature=0.2, seed=42, max_tokens=None),
        system_prompt="Be terse.",
    )
    settings.remember_model("/m/a.gguf")
    settings.remember_model("/m/b.gguf")
    settings.remember_model("/m/a.gguf")
    path = tmp_path / "settings.json"
    save_settings(settings, path)
    assert json.loads(path.read_text())["version"] == SETTINGS_VERSION
    loaded = load_settings(path)
    assert loaded == settings
    assert loaded.recent_models == ["/m/a.gguf", "/m/b.gguf"]


def test_missing_settings_file_gives_defaults(tmp_path):
    assert load_settings(tmp_path / "none.json") == Settings()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "Cannot read"),
        ("[1, 2]", "does not hold a JSON object"),
        ('{"version": 99}', "newer version"),
        ("[" * 100_000, "Cannot read .*: it is nested too deeply to be valid JSON. Fix or remove it."),
        ('{"a":' * 100_000, "nested too deeply"),
    ],
)
def test_broken_settings_file_says_what_to_do(tmp_path, content, expected):
    path = tmp_path / "settings.json"
    path.write_text(content)
    with pytest.raises(SettingsError, match=expected):
        load_settings(path)
    assert path.read_text() == content  # left as it was


def test_oversized_settings_file_is_refused_and_kept(tmp_path):
    path = tmp_path / "settings.json"
    content = '{"system_prompt": "' + "x" * MAX_SETTINGS_BYTES + '"}'
    path.write_text(content)
    with pytest.raises(SettingsError, match=r"Cannot read the settings file .*larger than 1 MiB.*Fix or remove it"):
        load_settings(path)
    assert path.read_text() == content


def test_settings_file_that_is_not_utf8_is_refused_and_kept(tmp_path):
    path = tmp_path / "settings.json"
    path.write_bytes(b'{"system_prompt": "\xff"}')
    with pytest.raises(SettingsError, match=r"Cannot read the settings file .*not valid JSON"):
        load_settings(path)
    assert path.read_bytes() == b'{"system_prompt": "\xff"}'


def test_settings_path_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    path = tmp_path / "settings.json"
    os.mkfifo(path)
    with pytest.raises(SettingsError, match="not a regular file"):
        load_settings(path)  # opened non-blocking: no writer needed for this to return


def test_load_params_problems():
    assert LoadParams().problems() == []
    assert "flash attention" in " ".join(LoadParams(type_v="q4_0").problems())
    assert LoadParams(type_v="q4_0", flash_attn=True).problems() == []
    assert "type_k" in " ".join(LoadParams(type_k="q3").problems())


def test_unknown_keys_in_params_are_ignored():
    assert SamplingParams.from_dict({"temperature": 0.1, "mirostat": 2}).temperature == 0.1


@pytest.mark.parametrize(
    ("arch", "has_template", "requested", "expected"),
    [
        ("gemma3", False, None, "gemma"),
        ("qwen2", False, None, "chatml"),
        ("llama", False, None, "llama-2"),
        ("llama", True, None, None),
        ("llama", True, "chatml", "chatml"),
        ("weirdarch", False, None, "chatml"),
    ],
)
def test_chat_format_choice(arch, has_template, requested, expected):
    choice = choose_chat_format(arch, has_template, requested)
    assert choice.chat_format == expected
    if not has_template and not requested:
        assert "no chat template" in choice.reason


def test_conversation_prompt_messages_and_titles():
    conversation = Conversation(system_prompt="sys", messages=[Message(Role.USER, "hi"), Message(Role.ASSISTANT, "")])
    assert conversation.prompt_messages() == [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    assert title_from("  a\nlong   title " * 10).endswith("…")
    assert MessageStatus.INTERRUPTED.is_partial and not MessageStatus.COMPLETE.is_partial
    assert "12 tokens" in ReplyStats(completion_tokens=12, decode_tokens_per_s=50.0).summary()
