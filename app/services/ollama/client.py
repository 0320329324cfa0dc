"""Talking to a local Ollama server: is it running, which models it has, pulling, deleting, showing.

Everything goes through ``ollama.AsyncClient`` except where the client cannot say it: there is no version
call, ``ShowResponse`` drops ``system``, ``messages``, ``requires``, ``renderer`` and ``parser``, and
``create`` cannot send ``renderer``/``parser``/``requires``/``draft_files``, and its streams are left
half-read when an ``{"error"}`` line arrives; those (show, create, pull) use raw httpx on the same host with
the same settings. Only the resolved host (the user's setting, else ``OLLAMA_HOST``, else
``http://127.0.0.1:11434``) is ever contacted: no redirects, no proxies from the environment.

Failures raise :class:`OllamaError` whose message says what happened and what to do next; ``status()``
never raises for a server that is not running, it reports it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.backends.http_json import response_json
from app.backends.ollama import (
    auth_headers,
    client_options,
    closing_lines,
    connection_failure,
    not_running_message,
    resolve_host,
)
from app.core import safe_json
from app.core.errors import AppError, ErrorKind
from app.core.lazy_import import lazy_import

if TYPE_CHECKING:
    import httpx
    import ollama
else:
    ollama = lazy_import("ollama")  # ~150 ms with pydantic: loaded when first used
    httpx = lazy_import("httpx")


log = logging.getLogger("app.services.ollama")

STATUS_TIMEOUT = 3.0
UPLOAD_CHUNK = 1 << 20
TOO_OLD_FOR_CREATE = "path or Modelfile are required"


class OllamaError(AppError):
    """A failure talking to Ollama, worded for a person: what happened and what to do next. Kind: unavailable
    (Ollama cannot be reached), not found (no such model), invalid input (a bad name or host), engine failed."""


@dataclass(frozen=True)
class OllamaStatus:
    running: bool
    host: str
    version: str | None = None
    reason: str = ""  # one calm line when not running

    def summary(self) -> str:
        return f"Ollama {self.version} at {self.host}" if self.running else self.reason


@dataclass(frozen=True)
class LocalModel:
    """A model Ollama has on disk (``/api/tags``)."""

    name: str
    size: int
    digest: str
    modified_at: str
    family: str = ""
    parameter_size: str = ""
    quantization_level: str = ""
    format: str = ""


@dataclass(frozen=True)
class RunningModel:
    """A model Ollama holds in memory (``/api/ps``)."""

    name: str
    size: int
    size_vram: int
    context_length: int | None
    expires_at: str

    @property
    def vram_fraction(self) -> float:
        return self.size_vram / self.size if self.size else 0.0


@dataclass(frozen=True)
class PullProgress:
    """One pull update: Ollama's status line and the bytes done / known so far across all layers."""

    status: str
    completed: int = 0
    total: int = 0
    digest: str | None = None

    @property
    def fraction(self) -> float | None:
        return self.completed / self.total if self.total else None

    @property
    def done(self) -> bool:
        return self.status == "success"


@dataclass(frozen=True)
class ModelDetails:
    """Everything ``/api/show`` says about a model, including what the official client drops."""

    name: str
    modelfile: str = ""
    parameters: str = ""  # Ollama's padded text, one "key value" per line
    template: str = ""
    system: str = ""
    license: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    model_info: dict[str, Any] = field(default_factory=dict)
    capabilities: list[str] = field(default_factory=list)
    modified_at: str = ""
    requires: str = ""
    renderer: str = ""
    parser: str = ""

    @property
    def architecture(self) -> str | None:
        arch = self.model_info.get("general.architecture") or self.details.get("family")
        return str(arch) if arch else None

    @property
    def context_length(self) -> int | None:
        value = self.model_info.get(f"{self.architecture}.context_length")
        return value if isinstance(value, int) else None


ProgressCallback = Callable[[PullProgress], None]


class OllamaService:
    """One Ollama server. Create it with the configured host (empty: ``OLLAMA_HOST``, else local default)."""

    def __init__(self, host: str | None = None) -> None:
        try:
            self.host = resolve_host(host)
        except ValueError as exc:
            raise OllamaError(f"{exc} Fix the Ollama host.", kind=ErrorKind.INVALID_INPUT, setting="host") from None
        self.client = ollama.AsyncClient(host=self.host, **client_options())
        # The raw calls send what the official client sends (it adds OLLAMA_API_KEY as a bearer token).
        self._http = httpx.AsyncClient(base_url=self.host, headers=auth_headers(), **client_options())

    async def close(self) -> None:
        await self.client.close()
        await self._http.aclose()

    async def __aenter__(self) -> OllamaService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- status and listings -------------------------------------------------------------------------------
    async def status(self) -> OllamaStatus:
        """Whether Ollama answers at the host, and its version. Never raises for "not running"."""
        try:
            response = await self._http.get("/api/version", timeout=STATUS_TIMEOUT)
        except httpx.ConnectError:
            return OllamaStatus(False, self.host, reason=not_running_message(self.host))
        except httpx.TimeoutException:
            reason = f"Ollama at {self.host} did not answer within {STATUS_TIMEOUT:.0f} s: it may be starting or busy."
            return OllamaStatus(False, self.host, reason=reason)
        except httpx.HTTPError as exc:
            return OllamaStatus(False, self.host, reason=f"Could not reach Ollama at {self.host}: {exc}.")
        try:
            answer = response_json(response, what="its version") if response.status_code == 200 else None
            version = answer.get("version") if answer is not None else None
        except (ValueError, AttributeError):  # ValueError: JsonError (not JSON, nested, too large)
            version = None
        if not isinstance(version, str):
            reason = (
                f"Something answered at {self.host} (HTTP {response.status_code}), but it is not Ollama. "
                "Check the Ollama host."
            )
            return OllamaStatus(False, self.host, reason=reason)
        return OllamaStatus(True, self.host, version=version)

    async def list_models(self) -> list[LocalModel]:
        response = await self._call(self.client.list(), "listing models")
        models = []
        for m in response.models:
            details = m.details
            models.append(
                LocalModel(
                    name=m.model or "",
                    size=int(m.size or 0),
                    digest=m.digest or "",
                    modified_at=m.modified_at.isoformat() if m.modified_at else "",
                    family=(details.family or "") if details else "",
                    parameter_size=(details.parameter_size or "") if details else "",
                    quantization_level=(details.quantization_level or "") if details else "",
                    format=(details.format or "") if details else "",
                )
            )
        return models

    async def running_models(self) -> list[RunningModel]:
        response = await self._call(self.client.ps(), "listing running models")
        return [
            RunningModel(
                name=m.model or m.name or "",
                size=int(m.size or 0),
                size_vram=int(m.size_vram or 0),
                context_length=m.context_length,
                expires_at=m.expires_at.isoformat() if m.expires_at else "",
            )
            for m in response.models
        ]

    # --- pull / delete / show ------------------------------------------------------------------------------
    async def pull(self, name: str, progress: ProgressCallback) -> None:
        """Download ``name``, reporting progress; returns only after Ollama said "success".

        Raises OllamaError if Ollama reports an error, the connection drops, or the stream ends early.
        """
        name = name.strip()
        if not name:
            raise OllamaError("Enter the name of a model to pull, for example llama3.2.", kind=ErrorKind.INVALID_INPUT)
        layers: dict[str, tuple[int, int]] = {}
        succeeded = False

        def on_line(part: dict[str, Any]) -> None:
            nonlocal succeeded
            status, digest = str(part.get("status") or ""), part.get("digest") or None
            if digest:
                layers[digest] = (int(part.get("completed") or 0), int(part.get("total") or 0))
            completed = sum(done for done, _ in layers.values())
            total = sum(size for _, size in layers.values())
            progress(PullProgress(status, completed, total, digest))
            succeeded = succeeded or status == "success"

        # The official client's request, read through stream_json: its own stream is left half-read on an error.
        body = {"model": name, "insecure": False, "stream": True}
        await self.stream_json("/api/pull", body, f"pulling {name}", on_line, model=name)
        if not succeeded:
            raise OllamaError(f"The pull of {name} ended before Ollama finished it. Try again.")

    async def delete(self, name: str) -> None:
        await self._call(self.client.delete(name), f"deleting {name}", name)

    async def show(self, name: str) -> ModelDetails:
        """``/api/show`` through raw HTTP, so that ``system``, ``messages`` and the rest are kept."""
        data = await self.request_json("POST", "/api/show", {"model": name}, f"reading {name}", name)
        if not isinstance(data, dict):
            raise OllamaError(f"Ollama sent an unreadable description of {name}.")
        return ModelDetails(
            name=name,
            modelfile=str(data.get("modelfile") or ""),
            parameters=str(data.get("parameters") or ""),
            template=str(data.get("template") or ""),
            system=str(data.get("system") or ""),
            license=str(data.get("license") or ""),
            messages=[
                {"role": str(m.get("role", "")), "content": str(m.get("content") or "")}
                for m in data.get("messages") or []
                if isinstance(m, dict)
            ],
            details=dict(data.get("details") or {}),
            model_info=dict(data.get("model_info") or {}),
            capabilities=[str(c) for c in data.get("capabilities") or []],
            modified_at=str(data.get("modified_at") or ""),
            requires=str(data.get("requires") or ""),
            renderer=str(data.get("renderer") or ""),
            parser=str(data.get("parser") or ""),
        )

    # --- raw HTTP, for what the official client cannot do ---------------------------------------------------
    async def request_json(
        self, method: str, path: str, body: dict[str, Any] | None, doing: str, model: str | None = None
    ) -> Any:
        """One JSON request on the host; an HTTP error becomes OllamaError with Ollama's own reason."""
        try:
            response = await self._http.request(method, path, json=body)
            if response.status_code >= 400:
                raise ollama.ResponseError(response.text, response.status_code)
            return response_json(response, what="the answer") if response.content else None
        except Exception as exc:
            raise self._error(exc, doing, model) from exc

    async def has_blob(self, digest: str) -> bool:
        """``HEAD /api/blobs/:digest``: does Ollama already have this file?"""
        try:
            response = await self._http.head(f"/api/blobs/{digest}")
        except Exception as exc:
            raise self._error(exc, "checking uploaded files") from exc
        if response.status_code not in (200, 404):
            raise OllamaError(f"Ollama answered HTTP {response.status_code} when asked about a file it has.")
        return response.status_code == 200

    async def upload_blob(
        self, path: Path, digest: str, size: int, on_bytes: Callable[[int], None] | None = None
    ) -> None:
        """``POST /api/blobs/:digest`` with the file's bytes, streamed with a Content-Length, read off the loop."""

        async def body() -> AsyncIterator[bytes]:
            sent = 0
            with path.open("rb") as handle:
                while chunk := await asyncio.to_thread(handle.read, UPLOAD_CHUNK):
                    sent += len(chunk)
                    if on_bytes is not None:
                        on_bytes(sent)
                    yield chunk

        try:
            response = await self._http.post(
                f"/api/blobs/{digest}", content=body(), headers={"Content-Length": str(size)}
            )
            if response.status_code >= 400:
                raise ollama.ResponseError(response.text, response.status_code)
        except OSError as exc:
            raise OllamaError(f"Cannot read {path}: {exc.strerror or exc}.") from exc
        except ollama.ResponseError as exc:
            if "digest mismatch" in str(exc.error):
                raise OllamaError(f"{path} changed while it was being uploaded. Try again.") from exc
            raise self._error(exc, f"uploading {path.name}") from exc
        except Exception as exc:
            raise self._error(exc, f"uploading {path.name}") from exc

    async def stream_json(
        self,
        path: str,
        body: dict[str, Any],
        doing: str,
        on_line: Callable[[dict[str, Any]], None],
        model: str | None = None,
    ) -> None:
        """POST, pass each NDJSON line to ``on_line``; an ``{"error"}`` line or a dropped connection raises OllamaError.

        The stream is closed before this returns or raises, however the loop ended (:func:`closing_lines`), so
        no half-read httpx stream is left to the garbage collector.
        """
        try:
            async with self._http.stream("POST", path, json=body) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise ollama.ResponseError(response.text, response.status_code)
                async with closing_lines(response) as lines:
                    async for line in lines:
                        if not line.strip():
                            continue
                        part = safe_json.loads(line, what="a line of the answer")
                        if isinstance(part, dict) and part.get("error"):
                            raise ollama.ResponseError(str(part["error"]))
                        if isinstance(part, dict):
                            on_line(part)
        except Exception as exc:
            raise self._error(exc, doing, model) from exc

    # --- errors --------------------------------------------------------------------------------------------
    async def _call(self, awaitable: Awaitable[Any], doing: str, model: str | None = None) -> Any:
        try:
            return await awaitable
        except Exception as exc:
            raise self._error(exc, doing, model) from exc

    def _error(self, exc: BaseException, doing: str, model: str | None = None) -> OllamaError:
        if isinstance(exc, OllamaError):
            return exc
        reason = connection_failure(exc, self.host, doing)
        if reason:
            return OllamaError(reason, kind=ErrorKind.UNAVAILABLE)
        if isinstance(exc, ollama.ResponseError):
            error = str(exc.error).strip()
            if exc.status_code == 404 and model:
                return OllamaError(
                    f"Ollama has no model named '{model}'. Check the name or pull it first.", kind=ErrorKind.NOT_FOUND
                )
            if TOO_OLD_FOR_CREATE in error:
                return OllamaError(
                    "This Ollama is too old to create models from this app: update Ollama (0.5.5+).",
                    kind=ErrorKind.UNAVAILABLE,
                )
            if exc.status_code == -1 and doing.startswith("pulling") and "file does not exist" in error:
                return OllamaError(
                    f"Ollama could not find {model or 'that model'} in its library ({error}). "
                    "Check the name and tag at https://ollama.com/library.",
                    kind=ErrorKind.NOT_FOUND,
                )
            if exc.status_code == -1:
                return OllamaError(f"Ollama reported an error while {doing}: {error}")
            return OllamaError(f"Ollama refused {doing}: {error} (HTTP {exc.status_code}).")
        log.error("Unexpected failure while %s: %r", doing, exc)
        return OllamaError(f"Something went wrong while {doing}: {exc}")
