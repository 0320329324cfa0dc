"""The vLLM backend's HTTP clients: replies spread over a few small connection pools (httpcore checks every
connection of a pool whenever a request starts or ends), made on first use, sharing one TLS context."""

from __future__ import annotations

import asyncio

from app.backends.openai_stream import ClientLanes


def test_replies_take_the_lanes_in_turn_and_each_is_made_once():
    async def scenario():
        lanes = ClientLanes("http://127.0.0.1:9", "secret", lanes=3)
        try:
            assert lanes._clients == [None, None, None]  # nothing made (nor TLS certificates read) until asked
            picked = [lanes.next() for _ in range(6)]
            assert len({id(c) for c in picked}) == 3 and picked[:3] == picked[3:]
            assert lanes.first is lanes._clients[0]
            assert all(c.headers["Authorization"] == "Bearer secret" for c in picked)
            assert len({id(c._transport._pool._ssl_context) for c in picked}) == 1  # one TLS context for all
            return picked
        finally:
            await lanes.aclose()

    picked = asyncio.run(scenario())
    assert all(c.is_closed for c in picked)
