"""The lean kept-alive POST used for whole answers from vLLM: real sockets against a small HTTP/1.1 server that
answers as uvicorn does (Content-Length, keep-alive), plus the ways a server can misbehave."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from app.backends.raw_http import KeptAlivePoster, usable_for
from tests.support.waiting import until


class Server:
    """Answers each POST with its JSON body echoed back; ``mode`` changes how."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode, self.connections, self.closed, self.requests = mode, 0, 0, []

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(v for k, v in _headers(head) if k == "content-length"))
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                if self.mode == "hang":
                    await asyncio.sleep(3600)
                answer = json.dumps({"echo": json.loads(body)}).encode()
                if self.mode == "chunked":
                    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                else:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))
                await writer.drain()
                if self.mode == "close_after_each":
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.closed += 1


def _headers(head: bytes) -> list[tuple[str, str]]:
    lines = head.decode().split("\r\n")[1:]
    return [(k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in lines if line)]


def test_answers_come_back_and_the_connection_is_kept():
    async def scenario():
        server = Server()
        async with server as url:
            poster = KeptAlivePoster(url, "key-123")
            answers = [await poster.post("/v1/chat/completions", json.dumps({"n": i}).encode()) for i in range(3)]
            await poster.aclose()
        return server, answers

    server, answers = asyncio.run(scenario())
    assert [json.loads(body) for _status, body in answers] == [{"echo": {"n": i}} for i in range(3)]
    assert {status for status, _ in answers} == {200} and server.connections == 1  # one connection for all three
    head = dict(_headers(server.requests[0][0]))
    assert head["authorization"] == "Bearer key-123" and head["content-type"] == "application/json"
    assert server.requests[0][0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")


def test_a_connection_the_server_closed_is_replaced_without_losing_the_request():
    async def scenario():
        server = Server("close_after_each")
        async with server as url:
            poster = KeptAlivePoster(url, None)
            first = await poster.post("/x", b"{}")
            await until(lambda: server.closed == 1)  # the server has closed the kept connection
            second = await poster.post("/x", b'{"a": 1}')
            await poster.aclose()
        return server, first, second

    server, first, second = asyncio.run(scenario())
    assert json.loads(first[1]) == {"echo": {}} and json.loads(second[1]) == {"echo": {"a": 1}}
    assert server.connections == 2
    assert len(server.requests) == 2  # the second request reached the server once


def test_no_server_is_a_connect_error_and_a_chunked_answer_is_refused():
    async def refused():
        server = Server()
        async with server as url:
            pass  # closed: nothing listens on that port any more
        await KeptAlivePoster(url, None).post("/x", b"{}")

    with pytest.raises(httpx.ConnectError):
        asyncio.run(refused())

    async def chunked():
        async with Server("chunked") as url:
            await KeptAlivePoster(url, None).post("/x", b"{}")

    with pytest.raises(httpx.RemoteProtocolError, match="chunked"):
        asyncio.run(chunked())


def test_a_cancelled_request_closes_its_connection():
    async def scenario():
        server = Server("hang")
        async with server as url:
            poster = KeptAlivePoster(url, None)
            task = asyncio.ensure_future(poster.post("/x", b"{}"))
            while not server.requests:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return poster._idle

    assert asyncio.run(scenario()) == []


def test_only_plain_http_addresses_use_it():
    assert usable_for("http://127.0.0.1:8000") and usable_for("http://gpu-box:8000/")
    assert not usable_for("https://vllm.example.com") and not usable_for("http://host:8000/prefix")
