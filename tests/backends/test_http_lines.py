"""Line splitting for SSE/NDJSON streams: only at \\n, never at the other characters str.splitlines() knows."""

from __future__ import annotations

import asyncio
import json

import httpx

from app.backends.http_lines import closing_lines

TRICKY = "a\u2028b\u2029c\x85d\x1ce\x0bf"


def _read(body: bytes, chunk: int) -> list[str]:
    async def scenario():
        parts = [body[i : i + chunk] for i in range(0, len(body), chunk)]

        async def stream():
            for part in parts:
                yield part

        transport = httpx.MockTransport(lambda request: httpx.Response(200, content=stream()))
        async with (
            httpx.AsyncClient(transport=transport) as client,
            client.stream("GET", "http://test/") as response,
            closing_lines(response) as lines,
        ):
            return [line async for line in lines]

    return asyncio.run(scenario())


def test_json_with_unicode_line_separators_stays_one_line():
    event = json.dumps({"content": TRICKY}, ensure_ascii=False)
    body = f"data: {event}\r\n\r\ndata: [DONE]\n\n".encode()
    for chunk in (1, 3, 7, len(body)):  # also split inside multi-byte characters
        lines = _read(body, chunk)
        assert lines == [f"data: {event}", "", "data: [DONE]", ""]
        assert json.loads(lines[0][6:])["content"] == TRICKY


def test_last_line_without_newline_is_kept():
    assert _read(b'{"a": 1}\n{"b": 2}', 4) == ['{"a": 1}', '{"b": 2}']
