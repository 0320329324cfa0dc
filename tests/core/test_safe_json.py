"""The one JSON loader: nesting, size, encoding and file kind all end in one clear, catchable error."""

from __future__ import annotations

import os
import threading

import pytest

from app.core import safe_json
from app.core.errors import ErrorKind, InvalidInputError
from app.core.safe_json import MAX_JSON_BYTES, JsonError

NESTED = ("[" * 100_000, '{"a":' * 100_000, '{"a": [' * 50_000)


@pytest.mark.parametrize("payload", NESTED)
def test_deep_nesting_is_a_json_error_not_a_recursion_error(payload):
    for data in (payload, payload.encode()):
        with pytest.raises(JsonError, match="the settings file is nested too deeply"):
            safe_json.loads(data, what="the settings file")


def test_the_error_is_a_value_error_of_the_invalid_input_kind():
    with pytest.raises(ValueError) as caught:
        safe_json.loads("{oops", what="the cache")
    assert isinstance(caught.value, InvalidInputError) and caught.value.kind is ErrorKind.INVALID_INPUT
    assert str(caught.value).startswith("the cache is not valid JSON: ")


def test_more_than_the_bound_is_refused_before_parsing():
    big = b'"' + b"x" * MAX_JSON_BYTES + b'"'
    with pytest.raises(JsonError, match="larger than 16 MiB"):
        safe_json.loads(big, what="an answer")
    with pytest.raises(JsonError, match="larger than 16 MiB"):
        safe_json.loads(big.decode(), what="an answer")  # counted in UTF-8 bytes for text too
    assert safe_json.loads(big, max_bytes=len(big)) == "x" * MAX_JSON_BYTES  # a caller may allow more
    assert safe_json.loads("[1]", max_bytes=None) == [1]


def test_multibyte_text_is_measured_in_bytes():
    text = '"' + "é" * 600 + '"'  # 602 characters, 1202 bytes
    with pytest.raises(JsonError, match="larger than"):
        safe_json.loads(text, max_bytes=1000)
    assert safe_json.loads(text, max_bytes=1202) == "é" * 600


def test_invalid_utf8_is_a_json_error():
    with pytest.raises(JsonError, match="not valid JSON"):
        safe_json.loads(b'{"a": "\xff\xfe"}', what="a line")


def test_loads_object_refuses_other_json_values():
    assert safe_json.loads_object('{"a": 1}') == {"a": 1}
    for value, kind in (("[1, 2]", "list"), ('"text"', "str"), ("3", "int"), ("null", "NoneType")):
        with pytest.raises(JsonError, match=f"the queue must be a JSON object, not {kind}"):
            safe_json.loads_object(value, what="the queue")


def test_load_file_reads_a_regular_file_and_passes_a_missing_one_through(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"ok": true}')
    assert safe_json.load_file(path) == {"ok": True}
    with pytest.raises(FileNotFoundError):
        safe_json.load_file(tmp_path / "missing.json")


def test_load_file_names_the_file_in_its_errors(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    with pytest.raises(JsonError, match=f"{path} is nested too deeply"):
        safe_json.load_file(path)


def test_load_file_refuses_a_file_over_its_bound(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b"[" + b"0," * 600 + b"0]")
    with pytest.raises(InvalidInputError, match="larger than 1 KiB"):
        safe_json.load_file(path, what="the cache", max_bytes=1024)


def _without_hanging(call):
    """Run ``call`` in a thread; a read that blocks (a FIFO with no writer) fails the test instead of hanging it."""
    outcome: list[BaseException | object] = []

    def run():
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the test
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(5)
    assert outcome, "the read blocked"
    return outcome[0]


def test_load_file_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "settings.json"
    os.mkfifo(fifo)
    error = _without_hanging(lambda: safe_json.load_file(fifo, what="the settings file"))
    assert isinstance(error, InvalidInputError)
    assert "the settings file is not a regular file" in str(error)


def test_load_file_refuses_a_link_to_a_device(tmp_path):
    link = tmp_path / "cache.json"
    link.symlink_to("/dev/zero")
    error = _without_hanging(lambda: safe_json.load_file(link))
    assert isinstance(error, InvalidInputError) and "not a regular file" in str(error)
