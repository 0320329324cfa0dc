"""Helpers for pages that follow the engine host's news."""

from __future__ import annotations

from collections.abc import Callable

from app.services.engines.events import EngineEvent, VllmEndpoint, VllmEndpointChanged
from app.services.engines.host import EngineHost


def follow_vllm_endpoint(host: EngineHost, changed: Callable[[VllmEndpoint | None], None]) -> Callable[[], None]:
    """Call ``changed`` with the vLLM server the host offers now, and again whenever that changes; returns the
    function that stops following (call it when the page shuts down)."""

    def on_event(event: EngineEvent) -> None:
        if isinstance(event, VllmEndpointChanged):
            changed(event.endpoint)

    unsubscribe = host.subscribe(on_event)
    changed(host.vllm_endpoint)
    return unsubscribe
