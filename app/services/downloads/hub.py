"""The Hugging Face Hub over ``huggingface_hub``: search, repository detail, download plans, remote GGUF estimates.

Every call blocks on the network: run it off the Qt thread. ``HF_ENDPOINT`` is read when a call is made (the
client itself reads it once, at import), and the token comes from the settings or huggingface_hub's own store.

These are interactive calls (a search box, a repository page): each is one request with a short connect timeout
and no retry loop, so an unreachable Hub fails within ``CONNECT_TIMEOUT_S`` (huggingface_hub's own search retries
five times with backoff, ~45 s offline). Downloads keep their own retries (``fetch``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from app.core import remote_paths as rp
from app.core.errors import AppError
from app.core.gguf.header import GgufFileError, GgufHeader, GgufHeaderIncomplete, read_gguf_header_bytes
from app.core.gguf.quant_names import (
    GgufCandidate,
    HubFile,
    group_gguf_files,
    matching_projector,
    parse_split,
    same_quant,
)
from app.services.downloads.fetch import kind_of_reason
from app.services.downloads.jobs import DownloadJob, JobFile

# our sort name -> the Hub API's (descending)
SORTS = {"downloads": "downloads", "likes": "likes", "recent": "lastModified", "trending": "trendingScore"}
FORMATS = ("gguf", "safetensors", "awq")  # Hub tags, used as search filters
HEADER_PREFIX_BYTES = 1 << 20
HEADER_MAX_BYTES = 256 << 20
CARD_MAX_BYTES = 256 << 10
_FOLDER_SUFFIXES = (".safetensors", ".json", ".model", ".tiktoken", ".jinja", ".txt")
CONNECT_TIMEOUT_S = 4.0  # an unreachable Hub (closed port, no route) fails within 5 s
READ_TIMEOUT_S = 10.0  # between two reads: a slow answer (thousands of files) still arrives


class HubError(AppError):
    """A Hub request failed; the message says what to do. ``reason``: auth, not_found, bad_input, network, http,
    bad_answer (the server sent something unusable or unsafe); ``kind`` follows from it (``REASON_KINDS``)."""

    def __init__(self, message: str, *, reason: str = "http", setting: str | None = None) -> None:
        super().__init__(message, kind=kind_of_reason(reason), setting=setting)
        self.reason = reason


@dataclass(frozen=True)
class RepoSummary:
    id: str
    downloads: int | None
    likes: int | None
    last_modified: str | None
    tags: tuple[str, ...]
    gated: str | bool | None

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class RepoDetail:
    id: str
    commit: str
    files: tuple[HubFile, ...]
    license: str | None
    gated: str | bool | None
    tags: tuple[str, ...]
    card_text: str = ""
    candidates: tuple[GgufCandidate, ...] = field(default=())

    @property
    def has_safetensors(self) -> bool:
        return any(f.path.endswith(".safetensors") for f in self.files)

    def file(self, path: str) -> HubFile | None:
        return next((f for f in self.files if f.path == path), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "commit": self.commit,
            "license": self.license,
            "gated": self.gated,
            "tags": list(self.tags),
            "files": [{"path": f.path, "size_bytes": f.size_bytes, "sha256": f.sha256} for f in self.files],
            "gguf": [c.to_dict() for c in self.candidates],
        }


def hub_endpoint(explicit: str | None = None) -> str:
    """The Hub URL: ``explicit``, else ``HF_ENDPOINT`` as set now, else huggingface_hub's default."""
    if explicit:
        return explicit.rstrip("/")
    if env := os.environ.get("HF_ENDPOINT"):
        return env.rstrip("/")
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def resolve_token(settings_token: str = "") -> str | None:
    """The token from the settings, else huggingface_hub's (``HF_TOKEN`` or ``hf auth login``'s store)."""
    if settings_token.strip():
        return settings_token.strip()
    from huggingface_hub import get_token

    return get_token()


class HubService:
    """Search and inspect repositories; plan downloads; estimate memory for remote GGUF files (blocking)."""

    def __init__(self, endpoint: str | None = None, token: str | None = None) -> None:
        self._endpoint, self.token = endpoint, token

    @property
    def endpoint(self) -> str:
        return hub_endpoint(self._endpoint)

    def _api(self) -> Any:
        from huggingface_hub import HfApi

        return HfApi(endpoint=self.endpoint, token=self.token or None)

    def search(
        self, query: str, *, fmt: str | None = None, sort: str = "downloads", limit: int = 30
    ) -> list[RepoSummary]:
        """Models matching ``query``; ``fmt`` one of FORMATS; ``sort`` one of SORTS (descending)."""
        if fmt is not None and fmt not in FORMATS:
            raise HubError(f"Unknown format filter {fmt!r}: use one of {', '.join(FORMATS)}.", reason="bad_input")
        if sort not in SORTS:
            raise HubError(f"Unknown sort {sort!r}: use one of {', '.join(SORTS)}.", reason="bad_input")
        params: dict[str, str | int] = {"sort": SORTS[sort], "limit": limit}
        if query:
            params["search"] = query
        if fmt is not None:
            params["filter"] = fmt
        with _hub_errors(self.endpoint, query):
            items = self._get_json("/api/models", params)
            if not isinstance(items, list):
                raise TypeError("the search answer is not a list")
            return [_summary(_model_info(item)) for item in items[:limit]]

    def _get_json(self, path: str, params: dict[str, str | int]) -> Any:
        """One GET on the Hub API with the interactive timeouts and no retry (raises what the client raises)."""
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        headers = build_hf_headers(token=self.token or None)
        response = get_session().get(f"{self.endpoint}{path}", params=params, headers=headers, timeout=_timeout())
        hf_raise_for_status(response)
        return response.json()

    def repo_detail(self, repo_id: str, revision: str = "main", *, with_card: bool = True) -> RepoDetail:
        """Files (sizes, LFS sha256), license, gated flag, GGUF candidates and the model card of ``repo_id``.

        Every value of the answer that later becomes a path is checked (``remote_paths``): a mirror that lists
        ``../x.gguf`` or a commit id that is not one is refused with a ``HubError`` (reason "bad_answer")."""
        with _remote_values("bad_input"):
            rp.repo_id(repo_id, rp.USER)
            rp.revision(revision, rp.USER)
        with _hub_errors(self.endpoint, repo_id), _remote_values("bad_answer"):
            info = self._api().model_info(repo_id, revision=revision, files_metadata=True, timeout=_timeout())
            detail = _detail(info, revision)
        if with_card and detail.file("README.md") is not None:
            detail = replace(detail, card_text=self._read_card(detail))
        return detail

    def _read_card(self, detail: RepoDetail) -> str:
        data = self.read_prefix(detail.id, detail.commit, "README.md", CARD_MAX_BYTES)
        text = data.decode("utf-8", errors="replace")
        if text.startswith("---"):  # drop the YAML front matter: license and tags are shown apart
            end = text.find("\n---", 3)
            text = text[end + 4 :] if end != -1 else text
        return text.strip()

    def read_prefix(self, repo_id: str, commit: str, path: str, length: int) -> bytes:
        """The first ``length`` bytes of a file (fewer when it is shorter), with one Range request; the body is
        streamed and the connection closed after ``length`` bytes, so a server that ignores the Range (200)
        does not send the whole file."""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        url = hf_hub_url(repo_id, path, revision=commit, endpoint=self.endpoint)
        headers = {**build_hf_headers(token=self.token or None), "Range": f"bytes=0-{length - 1}"}
        with _hub_errors(self.endpoint, repo_id):
            with get_session().stream(
                "GET", url, headers=headers, follow_redirects=True, timeout=_timeout()
            ) as response:
                hf_raise_for_status(response)
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) >= length:
                        break  # leaving the block closes the response
            return bytes(data[:length])

    def remote_header(self, detail: RepoDetail, candidate: GgufCandidate) -> GgufHeader:
        """The GGUF header of a candidate, fetched with growing Range prefixes; a split file's shards each give
        their tensors (the first shard holds the metadata), so the estimate counts every weight."""
        header = self._remote_file_header(detail, candidate.files[0])
        for shard in candidate.files[1:]:
            header.tensors = [*header.tensors, *self._remote_file_header(detail, shard).tensors]
        return header

    def _remote_file_header(self, detail: RepoDetail, hub_file: HubFile) -> GgufHeader:
        size = hub_file.size_bytes or HEADER_MAX_BYTES
        length = HEADER_PREFIX_BYTES
        while True:
            asked = min(length, size)
            data = self.read_prefix(detail.id, detail.commit, hub_file.path, asked)
            try:
                return read_gguf_header_bytes(data, name=hub_file.name, file_size=size)
            except GgufHeaderIncomplete as exc:
                if len(data) < asked or len(data) >= size:  # the whole file was read
                    raise GgufFileError(
                        f"{hub_file.name}: the file ends ({len(data):,} bytes) before the header it declares does: "
                        "the file is truncated or damaged. Choose another file."
                    ) from exc
                if length >= HEADER_MAX_BYTES:
                    raise GgufFileError(
                        f"{hub_file.name}: the header is larger than {HEADER_MAX_BYTES:,} bytes, too large to "
                        "estimate from the Hub. Download the file to inspect it."
                    ) from exc
                length = min(max(exc.bytes_needed + 4096, length * 4), HEADER_MAX_BYTES)

    def estimate(self, detail: RepoDetail, candidate: GgufCandidate, settings: Any, machine: Any) -> tuple[Any, Any]:
        """The memory estimate and fits verdict (``app.core.memory.fit``) of ``candidate`` under ``settings``
        (``EstimateSettings``) on ``machine`` (``MachineMemory``)."""
        from app.core.memory.estimate import estimate_memory
        from app.core.memory.fit import fit_verdict

        header = self.remote_header(detail, candidate)
        projector = None if candidate.is_projector else matching_projector(detail.candidates, candidate.quant)
        if projector is not None:  # downloaded and loaded with the model: its memory counts too
            settings = replace(settings, projector_bytes=projector.size_bytes or 0)
        return estimate_memory(header, settings), fit_verdict(header, settings, machine)

    def plan_download(
        self, detail: RepoDetail, *, files: list[str] | None = None, quant: str | None = None, target_dir: str = ""
    ) -> DownloadJob:
        """A job for ``files`` (a split GGUF's shards come along), a ``quant``, or by default the HF folder."""
        chosen = _choose_files(detail, files or [], quant)
        chosen += _projector_for(detail, chosen)
        job_files = [JobFile(f.path, f.size_bytes, f.sha256, f.blob_id) for f in chosen]
        return DownloadJob(repo_id=detail.id, commit=detail.commit, files=job_files, target_dir=target_dir)


def _detail(info: Any, revision: str) -> RepoDetail:
    """A ``RepoDetail`` from ``model_info``'s answer, every remote value checked (raises ``RemotePathError``)."""
    files = tuple(_hub_file(s) for s in info.siblings or [])
    card = info.card_data.to_dict() if info.card_data else {}
    tags = [t for t in info.tags or () if isinstance(t, str)]
    return RepoDetail(
        id=rp.repo_id(info.id),
        commit=rp.commit_id(info.sha if info.sha is not None else _commit_like(revision)),
        files=files,
        license=_license(card, tags),
        gated=info.gated,
        tags=tuple(tags),
        candidates=tuple(group_gguf_files(files)),
    )


def _commit_like(revision: str) -> str | None:
    """An answer without a commit id is usable only when the revision asked for is one."""
    return revision if rp.COMMIT_RE.fullmatch(revision) else None


def _hub_file(sibling: Any) -> HubFile:
    path = rp.repo_file(sibling.rfilename)
    lfs = sibling.lfs
    size = rp.file_size(lfs.size if lfs else sibling.size, name=path)
    return HubFile(path, size, rp.sha256_hex(lfs.sha256) if lfs else None, rp.blob_id(sibling.blob_id))


@contextlib.contextmanager
def _remote_values(reason: str) -> Iterator[None]:
    """A refused value (``RemotePathError``) becomes a ``HubError`` of ``reason``."""
    try:
        yield
    except rp.RemotePathError as exc:
        raise HubError(str(exc), reason=reason) from None


def _choose_files(detail: RepoDetail, names: list[str], quant: str | None) -> list[HubFile]:
    if names:
        chosen: list[HubFile] = []
        for name in names:
            if detail.file(name) is None:
                raise HubError(f"{detail.id} has no file {name!r}.", reason="bad_input", setting="files")
            group = next((c for c in detail.candidates if name in {f.path for f in c.files}), None)
            split = parse_split(name)
            extra = list(group.files) if group and split else [detail.file(name)]
            chosen += [f for f in extra if f is not None and f not in chosen]
        return chosen
    models = [c for c in detail.candidates if not c.is_projector]
    if quant:
        matches = [c for c in models if same_quant(c.quant, quant)]
        if len(matches) != 1:
            have = ", ".join(sorted({c.quant or c.key for c in models})) or "none"
            what = "several files have" if matches else "no GGUF file has"
            raise HubError(f"In {detail.id} {what} quantization {quant} (available: {have}).", reason="bad_input")
        return list(matches[0].files)
    if detail.has_safetensors:
        return [f for f in detail.files if "/" not in f.path and f.path.endswith(_FOLDER_SUFFIXES)]
    if len(models) == 1:
        return list(models[0].files)
    have = ", ".join(c.quant or c.key for c in models) or "no GGUF or safetensors files"
    raise HubError(
        f"Choose a file or a quantization in {detail.id} (available: {have}).", reason="bad_input", setting="quant"
    )


def _projector_for(detail: RepoDetail, chosen: list[HubFile]) -> list[HubFile]:
    """A vision model's projector, downloaded with it: the matching mmproj file when the repository has one and
    none was chosen (a model without its projector cannot read images)."""
    chosen_paths = {f.path for f in chosen}
    groups = [c for c in detail.candidates if chosen_paths & {f.path for f in c.files}]
    if not groups or any(c.is_projector for c in groups):
        return []
    projector = matching_projector(detail.candidates, groups[0].quant)
    return list(projector.files) if projector is not None else []


def _timeout() -> Any:
    import httpx2

    return httpx2.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)


def _model_info(item: Any) -> Any:
    """huggingface_hub's ``ModelInfo`` from one search item (a TypeError for an item that is not an object)."""
    from huggingface_hub.hf_api import ModelInfo

    if not isinstance(item, dict):
        raise TypeError("a search item is not an object")
    return ModelInfo(**{"siblings": None, **item})


def _summary(model: Any) -> RepoSummary:
    modified = model.last_modified.isoformat() if model.last_modified else None
    return RepoSummary(model.id, model.downloads, model.likes, modified, tuple(model.tags or ()), model.gated)


def _license(card: dict[str, Any], tags: list[str]) -> str | None:
    if isinstance(card.get("license"), str):
        return str(card["license"])
    return next((t.split(":", 1)[1] for t in tags if t.startswith("license:")), None)


@contextlib.contextmanager
def _hub_errors(endpoint: str, what: str) -> Iterator[None]:
    """Turn huggingface_hub / HTTP errors into HubError with a message that says what to do."""
    try:
        yield
    except (HubError, GgufFileError):
        raise
    except Exception as exc:
        raise _translate(exc, endpoint, what) from None


def _translate(exc: BaseException, endpoint: str, what: str) -> HubError:
    import httpx2
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError

    if isinstance(exc, RecursionError | json.JSONDecodeError | UnicodeDecodeError):  # json.loads in the client
        problem = "nested too deeply to be" if isinstance(exc, RecursionError) else "not"
        return HubError(
            f"The server at {endpoint} answered the request for {what} with JSON that is {problem} valid; "
            "refusing it (is HF_ENDPOINT a mirror you trust?).",
            reason="bad_answer",
        )
    if isinstance(exc, OfflineModeIsEnabled):
        return HubError("Hugging Face offline mode is on (HF_HUB_OFFLINE): unset it to use the Hub.", reason="network")
    if isinstance(exc, GatedRepoError):
        return HubError(
            f"{what} is gated: accept its license on {endpoint}/{what}, then set a Hugging Face token "
            "(Settings, or `hf auth login`).",
            reason="auth",
        )
    if isinstance(exc, RepositoryNotFoundError):
        return HubError(f"{what} was not found on {endpoint} (or it is private: set a token).", reason="not_found")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "?"
        if status in (401, 403):
            return HubError(f"The Hub refused access to {what} (HTTP {status}): set a valid token.", reason="auth")
        return HubError(f"The Hub answered HTTP {status} for {what}; try again later.", reason="http")
    if isinstance(exc, KeyError | TypeError | ValueError):  # a field missing, of the wrong type, or unparsable
        return HubError(
            f"The server at {endpoint} answered the request for {what} with data in an unexpected shape "
            f"({type(exc).__name__}: {rp.shown(str(exc))}); is HF_ENDPOINT a mirror you trust?",
            reason="bad_answer",
        )
    if isinstance(exc, httpx2.TransportError | OSError):
        return HubError(
            f"Cannot reach the Hub at {endpoint} ({type(exc).__name__}): check the connection.", reason="network"
        )
    return HubError(f"The Hub request for {what} failed: {exc}", reason="http")
