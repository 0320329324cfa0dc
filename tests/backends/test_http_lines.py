"""Line splitting for SSE/NDJSON streams: only at \\n, never at the other characters str.splitlines() knows."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from app.backends.http_json import response_json, response_json_or_none
from app.backends.http_lines import MAX_LINE_BYTES, closing_byte_lines, closing_lines, iter_lines
from app.core.safe_json import MAX_JSON_BYTES, JsonError

TRICKY = "a\u2028b\u2029c\x85d\x1ce\x0bf"


def _lines(body: bytes, chunk: int, read) -> list:
    """``await read(response)`` on a response whose body arrives in pieces of ``chunk`` bytes."""

    async def scenario():
        parts = [body[i : i + chunk] for i in range(0, len(body), chunk)]

        async def stream():
            for part in parts:
                yield part

        transport = httpx.MockTransport(lambda request: httpx.Response(200, content=stream()))
        async with httpx.AsyncClient(transport=transport) as client, client.stream("GET", "http://test/") as response:
            return await read(response)

    return asyncio.run(scenario())


def _read(body: bytes, chunk: int, reader=closing_lines) -> list:
    async def read(response):
        async with reader(response) as lines:
            return [line async for line in lines]

    return _lines(body, chunk, read)


def test_json_with_unicode_line_separators_stays_one_line():
    event = json.dumps({"content": TRICKY}, ensure_ascii=False)
    body = f"data: {event}\r\n\r\ndata: [DONE]\n\n".encode()
    for chunk in (1, 3, 7, len(body)):  # also split inside multi-byte characters
        lines = _read(body, chunk)
        assert lines == [f"data: {event}", "", "data: [DONE]", ""]
        assert json.loads(lines[0][6:])["content"] == TRICKY


def test_last_line_without_newline_is_kept():
    assert _read(b'{"a": 1}\n{"b": 2}', 4) == ['{"a": 1}', '{"b": 2}']


def test_byte_lines_keep_what_is_not_utf8_for_the_json_parser_to_refuse():
    body = b'data: {"a": "\xff"}\r\n\ndata: [DONE]'
    assert _read(body, 5, closing_byte_lines) == [b'data: {"a": "\xff"}', b"", b"data: [DONE]"]
    assert _read(body, 5)[0] == 'data: {"a": "\ufffd"}'  # the text reader replaces it


def _read_bounded(body: bytes, chunk: int, limit: int) -> list[str]:
    async def read(response):
        return [line async for line in iter_lines(response, max_line_bytes=limit)]

    return _lines(body, chunk, read)


def test_a_line_longer_than_the_bound_is_refused_as_soon_as_it_is_that_long():
    for chunk in (1, 3, 64):
        assert _read_bounded(b"0123456789\nabc\r\n0123456789", chunk, 10) == ["0123456789", "abc", "0123456789"]
        with pytest.raises(JsonError, match="the server sent a line larger than"):
            _read_bounded(b"ok\n" + b"x" * 11 + b"\n", chunk, 10)
        with pytest.raises(JsonError):
            _read_bounded(b"ok\n" + b"x" * 1000, chunk, 10)  # no newline ever comes


def test_the_default_bound_is_one_json_document_and_a_field_name():
    assert MAX_LINE_BYTES == MAX_JSON_BYTES + 1024
    line = b"data: " + b"x" * MAX_JSON_BYTES
    assert _read_bounded(line + b"\n", 1 << 16, MAX_LINE_BYTES) == [line.decode()]


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"a":' * 100_000, b"{oops", b'"' + b"x" * MAX_JSON_BYTES + b'"'])
def test_response_json_turns_every_bad_body_into_one_error(body):
    response = httpx.Response(200, content=body)
    with pytest.raises(JsonError, match="the answer"):
        response_json(response, what="the answer")
    assert response_json_or_none(response) is None
    assert response_json(httpx.Response(200, content=b'{"data": []}'), what="x") == {"data": []}
