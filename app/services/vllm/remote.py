"""A vLLM server someone else started: is it up, and which models it serves (``/health``, ``/v1/models`` with
the key). Every failure is a ``RemoteError`` whose message says what happened and what to do."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.backends.http_json import response_json
from app.backends.protocol import BackendError
from app.backends.vllm import normalize_url
from app.core.errors import ErrorKind, UnavailableError
from app.core.lazy_import import lazy_import
from app.services.vllm.metrics import TIMEOUT_S, unreachable

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_import("httpx")  # ~100 ms: loaded when first used


class RemoteError(UnavailableError):
    """The server cannot be used; ``setting`` names what fixes it ("endpoint" or "api_key")."""

    setting = "endpoint"


async def probe_remote(url: str, api_key: str | None) -> tuple[str, list[str]]:
    """``(base URL, served model names)`` of the vLLM at ``url``; RemoteError when it is down or refuses the key."""
    try:
        base = normalize_url(url)
    except BackendError as exc:
        raise RemoteError(str(exc), kind=ErrorKind.INVALID_INPUT) from None
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=TIMEOUT_S, trust_env=False) as client:
        try:
            health = await client.get("/health")
            if health.status_code != 200:
                raise RemoteError(
                    f"vLLM at {base} is not ready (/health answered {health.status_code}): it is still loading "
                    "the model, or its engine stopped. Wait a moment and Connect again."
                )
            models = await client.get("/v1/models")
        except httpx.HTTPError as exc:
            raise RemoteError(str(unreachable(base, exc, TIMEOUT_S))) from None
    return base, _served(base, models, api_key)


def _served(base: str, models: httpx.Response, api_key: str | None) -> list[str]:
    if models.status_code in (401, 403):
        said = "refused the API key" if api_key else "needs an API key"
        raise RemoteError(f"vLLM at {base} {said} (HTTP 401): enter the key it was started with.", setting="api_key")
    try:
        data: Any = response_json(models, what="/v1/models")["data"] if models.status_code == 200 else None
        names = [str(entry["id"]) for entry in data]
    except (ValueError, KeyError, TypeError):  # ValueError: JsonError (not JSON, nested too deeply, too large)
        raise RemoteError(
            f"The server at {base} answered /v1/models with HTTP {models.status_code}, not a model list: "
            "is it a vLLM (OpenAI-compatible) server?"
        ) from None
    if not names:
        raise RemoteError(f"vLLM at {base} serves no model yet. Wait until it has loaded one, then Connect again.")
    return names
