"""A local Hugging Face Hub for tests: the endpoints huggingface_hub calls, with faults on request.

Serves ``GET /api/models`` (search), ``GET /api/models/{repo}[/revision/{rev}]`` (model info with siblings
and LFS data when ``blobs=true``) and ``HEAD/GET /{repo}/resolve/{rev}/{path}`` with ETag, X-Repo-Commit,
Content-Length, Accept-Ranges and Range (206 / 416; with ``ignore_range``, 200 and the whole file). Gated
repositories answer 401 (no token) or 403 (wrong token) with ``X-Error-Code: GatedRepo``, as the Hub does. Every
resolve request is logged with its Range and the body bytes actually sent, so tests can prove what a resumed
download re-fetched. Hooks let it play a hostile mirror: ``Repo.info_extra``/``sibling_extra``/``raw_info``,
``HubServer.raw_search`` and ``catch_all``.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".gguf", ".safetensors", ".bin")
VALID_TOKEN = "hf_testtokentesttokentesttoken01"


@dataclass
class FileFault:
    """Faults for one file; each counter is spent one request at a time."""

    drop_after_bytes: int | None = None  # close the connection after sending this many body bytes
    drops: int = 1
    stall_after_bytes: int | None = None  # stop sending for ``stall_s`` after this many body bytes
    stall_s: float = 0.0
    stalls: int = 1
    errors_5xx: int = 0  # answer 503 to this many GETs first
    corrupt: bool = False  # serve flipped bytes (the listed sha256 stays the true one)


@dataclass
class Repo:
    id: str
    files: dict[str, bytes]
    gated: bool = False
    license: str | None = "apache-2.0"
    tags: list[str] = field(default_factory=list)
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2026-01-01T00:00:00.000Z"
    # A hostile mirror's hooks: fields merged into the model info answer (e.g. {"sha": "../x"}) or into one
    # file's sibling entry (e.g. {"size": -1}), or the raw bytes of the whole answer (e.g. deeply nested JSON).
    info_extra: dict[str, Any] = field(default_factory=dict)
    sibling_extra: dict[str, dict[str, Any]] = field(default_factory=dict)
    raw_info: bytes | None = None

    @property
    def commit(self) -> str:
        return hashlib.sha1(self.id.encode()).hexdigest()

    def sibling(self, path: str) -> dict[str, Any]:
        data = self.files[path]
        blob_id = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        item: dict[str, Any] = {"rfilename": path, "size": len(data), "blobId": blob_id}
        if path.endswith(LFS_SUFFIXES):
            item["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
        return item | self.sibling_extra.get(path, {})


@dataclass(frozen=True)
class RangeLog:
    path: str
    method: str
    status: int
    start: int  # the first byte asked for (0 without a Range)
    sent_bytes: int  # body bytes written before the response ended


class HubServer:
    """Start with ``with HubServer() as hub:``; ``hub.url`` is the endpoint."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.faults: dict[str, FileFault] = {}
        self.log: list[RangeLog] = []
        self.throttle_bytes_per_s: float | None = None
        self.chunk_bytes = 64 << 10
        self.redirect_lfs = False  # answer LFS resolves with a 302 to /cdn/..., as huggingface.co does
        self.ignore_range = False  # answer every GET with 200 and the whole file, as some mirrors do
        self.raw_search: bytes | None = None  # the raw body of every search answer (a hostile mirror's)
        self.catch_all: bytes | None = None  # serve these bytes for any other file path, as a hostile mirror may
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="hf-test-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, repo: Repo) -> Repo:
        self.repos[repo.id] = repo
        return repo

    def record(self, entry: RangeLog) -> None:
        with self._lock:
            self.log.append(entry)

    def sent_bytes(self, path: str) -> int:
        """Body bytes sent for ``path`` by GET over the whole run."""
        return sum(e.sent_bytes for e in self.log if e.path == path and e.method == "GET")

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._route("GET")

        def do_HEAD(self) -> None:
            self._route("HEAD")

        def _route(self, method: str) -> None:
            parts = urlsplit(self.path)
            path = unquote(parts.path)
            query = parse_qs(parts.query)
            try:
                if path == "/api/models":
                    self._search(query)
                elif path.startswith("/api/models/"):
                    self._info(path[len("/api/models/") :], query)
                elif "/resolve/" in path:
                    self._resolve(method, path)
                elif path.startswith("/cdn/"):
                    self._cdn(method, path[len("/cdn/") :])
                elif hub.catch_all is not None and not path.startswith("/api/"):
                    self._send_any(method, path, hub.catch_all)
                else:
                    self._send_json(404, {"error": "not found"})
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _search(self, query: dict[str, list[str]]) -> None:
            if hub.raw_search is not None:
                self._send_json(200, hub.raw_search)
                return
            text = (query.get("search") or [""])[0].lower()
            filters = query.get("filter", [])
            repos = [r for r in hub.repos.values() if text in r.id.lower() and all(f in r.tags for f in filters)]
            sort = (query.get("sort") or [""])[0]
            key = {"downloads": "downloads", "likes": "likes", "lastModified": "last_modified"}.get(sort)
            if key:
                repos.sort(key=lambda r: getattr(r, key), reverse=True)
            limit = int((query.get("limit") or ["1000"])[0])
            self._send_json(200, [self._summary(r) for r in repos[:limit]])

        def _summary(self, repo: Repo) -> dict[str, Any]:
            return {
                "id": repo.id,
                "modelId": repo.id,
                "downloads": repo.downloads,
                "likes": repo.likes,
                "lastModified": repo.last_modified,
                "tags": repo.tags,
                "gated": "manual" if repo.gated else False,
                "private": False,
            }

        def _info(self, rest: str, query: dict[str, list[str]]) -> None:
            repo_id = rest.split("/revision/")[0]
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._send_json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                return
            if repo.raw_info is not None:
                self._send_json(200, repo.raw_info)
                return
            body = self._summary(repo) | {
                "sha": repo.commit,
                "cardData": {"license": repo.license} if repo.license else {},
                "siblings": [
                    repo.sibling(p)
                    if query.get("blobs") == ["True"] or query.get("blobs") == ["true"]
                    else {"rfilename": p}
                    for p in repo.files
                ],
            }
            self._send_json(200, body | repo.info_extra)

        def _resolve(self, method: str, path: str) -> None:
            repo_id, rest = path.lstrip("/").split("/resolve/", 1)
            _revision, file_path = rest.split("/", 1)
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._send_json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                return
            if repo.gated and self.headers.get("Authorization") != f"Bearer {VALID_TOKEN}":
                status = 403 if self.headers.get("Authorization") else 401
                hub.record(RangeLog(file_path, method, status, 0, 0))
                self._send_json(
                    status,
                    {"error": "Access to model is restricted."},
                    {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access to model is restricted."},
                )
                return
            if file_path not in repo.files and hub.catch_all is not None:
                self._send_any(method, file_path, hub.catch_all)
                return
            if file_path not in repo.files:
                self._send_json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
                return
            sibling = repo.sibling(file_path)
            if hub.redirect_lfs and "lfs" in sibling:
                self._redirect(method, repo, file_path, sibling)
                return
            self._serve(method, repo, file_path)

        def _redirect(self, method: str, repo: Repo, file_path: str, sibling: dict[str, Any]) -> None:
            hub.record(RangeLog(file_path, method, 302, 0, 0))
            self.send_response(302)
            self.send_header("Location", f"/cdn/{repo.id}/{file_path}")
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("X-Linked-Etag", f'"{sibling["lfs"]["sha256"]}"')
            self.send_header("X-Linked-Size", str(sibling["lfs"]["size"]))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _cdn(self, method: str, rest: str) -> None:
            owner, name, file_path = rest.split("/", 2)
            repo = hub.repos.get(f"{owner}/{name}")
            if repo is None or file_path not in repo.files:
                self._send_json(404, {"error": "not found"})
                return
            self._serve(method, repo, file_path)

        def _serve(self, method: str, repo: Repo, file_path: str) -> None:
            fault = hub.faults.get(file_path, FileFault())
            if method == "GET" and fault.errors_5xx > 0:
                fault.errors_5xx -= 1
                hub.record(RangeLog(file_path, method, 503, 0, 0))
                self._send_json(503, {"error": "Service unavailable"})
                return
            self._send_file(method, repo, file_path, fault)

        def _send_file(self, method: str, repo: Repo, file_path: str, fault: FileFault) -> None:
            data = repo.files[file_path]
            if fault.corrupt:
                data = bytes(b ^ 0xFF for b in data)
            sibling = repo.sibling(file_path)
            etag = sibling["lfs"]["sha256"] if "lfs" in sibling else sibling["blobId"]
            start, end, status = self._range(len(data))
            if status == 416:
                hub.record(RangeLog(file_path, method, 416, start, 0))
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(status)
            self.send_header("ETag", f'"{etag}"')
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
            self.end_headers()
            sent = 0 if method == "HEAD" else self._stream(data[:end], start, fault)
            hub.record(RangeLog(file_path, method, status, start, sent))

        def _send_any(self, method: str, path: str, data: bytes) -> None:
            """``data`` whole, whatever was asked for (a hostile mirror's answer to a path it does not have)."""
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if method == "GET":
                self.wfile.write(data)
            hub.record(RangeLog(path, method, 200, 0, len(data) if method == "GET" else 0))

        def _range(self, size: int) -> tuple[int, int, int]:
            """(first byte, end exclusive, status) for the request's Range header."""
            header = self.headers.get("Range", "")
            if hub.ignore_range or not header.startswith("bytes="):
                return 0, size, 200
            first, _, last = header[len("bytes=") :].partition("-")
            start, end = int(first), min(int(last) + 1, size) if last else size
            return (start, end, 416) if start >= size else (start, end, 206)

        def _stream(self, data: bytes, start: int, fault: FileFault) -> int:
            sent, pos = 0, start
            while pos < len(data):
                step = hub.chunk_bytes
                if fault.drop_after_bytes is not None and fault.drops > 0:
                    if sent >= fault.drop_after_bytes:
                        fault.drops -= 1
                        self._drop()
                        return sent
                    step = min(step, fault.drop_after_bytes - sent)
                if fault.stall_after_bytes is not None and fault.stalls > 0:
                    if sent >= fault.stall_after_bytes:
                        fault.stalls -= 1
                        time.sleep(fault.stall_s)
                    else:
                        step = min(step, fault.stall_after_bytes - sent)
                block = data[pos : pos + step]
                try:
                    self.wfile.write(block)
                except (TimeoutError, BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                    return sent
                sent += len(block)
                pos += len(block)
                if hub.throttle_bytes_per_s:
                    time.sleep(len(block) / hub.throttle_bytes_per_s)
            return sent

        def _drop(self) -> None:
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)

    return Handler


def use_hub(server: HubServer, monkeypatch: Any, tmp_path: Any) -> None:
    """Point huggingface_hub at ``server`` with an empty cache and no stored token."""
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def random_bytes(size: int, seed: int = 0) -> bytes:
    """Deterministic incompressible test content."""
    import random

    return random.Random(seed).randbytes(size)
