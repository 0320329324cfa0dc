"""Which llama.cpp requests may run on the parallel engine (continuous batching) and which need the single worker:
the engine host's rule (``app.services.engines.parallel_route``) on the API's request shape, ``echo`` included.
The request log says why a request went to the single worker (``serial_reason``)."""

from __future__ import annotations

from app.services.api.fields import GenerationCall
from app.services.engines import parallel_route


def serial_reason(call: GenerationCall) -> str | None:
    """Why ``call`` cannot run on the parallel engine, in words for the request log; None when it can."""
    return parallel_route.serial_reason(call.messages, call.options, echo=call.echo)
