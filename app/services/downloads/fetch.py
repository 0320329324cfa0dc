"""Fetch one file with HTTP Range requests into a partial file that survives a kill.

``huggingface_hub.hf_hub_download`` (2.x) writes each attempt to a process-unique ``.incomplete`` file and
deletes it when the attempt fails, so a killed or failed download starts again from zero. This module fills
that gap through ``huggingface_hub``'s own configured HTTP session: bytes are appended to one partial file per
blob, so the next attempt (or the next process) asks only for ``Range: bytes=<partial size>-``. Every byte is
written in stream order (unbuffered, as it arrives), so whatever prefix is on disk after a kill is valid;
``fsync`` runs every ``FSYNC_EVERY_BYTES`` on a helper thread and only then is the offset reported as durable,
and once more before the file is handed over. The sha256 is computed while writing, on its own thread (and over
the existing prefix when resuming), so verification needs no second pass over the file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.errors import AppError, ErrorKind

FSYNC_EVERY_BYTES = 64 << 20
CONNECT_TIMEOUT_S = 15.0
MAX_BACKOFF_S = 60.0


# Why a Hub request or a download failed (a job keeps it in ``error_kind``), and the app's error kind of each.
REASON_KINDS: dict[str, ErrorKind] = {
    "bad_input": ErrorKind.INVALID_INPUT,  # a file, quantization or path that cannot be asked for
    "not_found": ErrorKind.NOT_FOUND,
    "busy": ErrorKind.BUSY,  # another process is downloading the same file
    "auth": ErrorKind.UNAVAILABLE,  # gated or private: a token is needed
    "network": ErrorKind.UNAVAILABLE,
    "http": ErrorKind.UNAVAILABLE,
    "bad_answer": ErrorKind.UNAVAILABLE,  # the server sent something unusable or unsafe
    "changed": ErrorKind.UNAVAILABLE,  # the file changed on the Hub mid-download
    "disk": ErrorKind.UNAVAILABLE,  # no space, or the folder cannot be written
    "hash": ErrorKind.ENGINE_FAILED,
    "failed": ErrorKind.ENGINE_FAILED,
}


def kind_of_reason(reason: str) -> ErrorKind:
    return REASON_KINDS.get(reason, ErrorKind.ENGINE_FAILED)


class DownloadError(AppError):
    """A download failed; the message says what happened and what to do next. ``reason``: one of
    ``REASON_KINDS`` ("auth", "not_found", "disk", "hash", "network", "busy", "changed", "failed")."""

    def __init__(self, message: str, *, reason: str = "failed", setting: str | None = None) -> None:
        super().__init__(message, kind=kind_of_reason(reason), setting=setting)
        self.reason = reason


class DownloadStopped(Exception):
    """The owner asked the transfer to stop (pause, cancel or shutdown)."""


class _Retryable(Exception):
    pass


@dataclass
class Transfer:
    """Counters a worker thread updates and its owner reads (plain ints: safe to read from another thread)."""

    done_bytes: int = 0
    durable_bytes: int = 0
    last_byte_monotonic: float = field(default_factory=time.monotonic)
    note: str = ""  # e.g. "connection lost; retrying in 4 s"
    requests: int = 0


@dataclass(frozen=True)
class FetchTarget:
    url: str
    partial_path: Path
    size_bytes: int | None
    headers: dict[str, str]
    label: str  # the file's name in messages


@dataclass(frozen=True)
class FetchPolicy:
    stall_s: float = 20.0  # no byte for this long: the read times out and the transfer is retried
    max_retries: int = 8  # consecutive failed attempts without progress
    backoff_s: float = 1.0  # first retry delay, doubled per failure


def sha256_of_prefix(path: Path) -> tuple[Any, int]:
    """A running sha256 over the file at ``path`` (empty when missing) and the number of bytes it covered."""
    hasher = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as f:
            while block := f.read(8 << 20):
                hasher.update(block)
                size += len(block)
    except FileNotFoundError:
        pass
    return hasher, size


class _BackgroundSha256:
    """sha256 on a helper thread (hashlib drops the GIL on large updates), so hashing overlaps the network."""

    def __init__(self, hasher: Any) -> None:
        self._hasher = hasher
        self._chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=256)
        self._thread = threading.Thread(target=self._run, name="sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (chunk := self._chunks.get()) is not None:
            self._hasher.update(chunk)

    def update(self, chunk: bytes) -> None:
        self._chunks.put(chunk)

    def hexdigest(self) -> str:
        self.close()
        return str(self._hasher.hexdigest())

    def close(self) -> None:
        if self._thread.is_alive():
            self._chunks.put(None)
            self._thread.join()


class _Partial:
    """The partial file's running sha256 and length, kept in step with every byte written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        hasher, self.offset = sha256_of_prefix(path)
        self.hasher = _BackgroundSha256(hasher)

    def restart(self) -> None:
        self.path.unlink(missing_ok=True)
        self.hasher.close()
        self.hasher, self.offset = _BackgroundSha256(hashlib.sha256()), 0


READ_BYTES = 256 << 10


def _tune_reads() -> None:
    """Let httpcore read up to 256 KiB per ``recv`` instead of 64 KiB (one class attribute of huggingface_hub's
    transport). A read never waits to fill the buffer, so small responses are unaffected; on a fast link it cuts
    the per-read overhead (timeout set-up, h11 events) by four: ``bench download`` measured 0.82 -> 1.1 x curl."""
    try:
        from httpcore2._sync.http11 import HTTP11Connection
    except ImportError:  # another transport: keep its default
        return
    if getattr(HTTP11Connection, "READ_NUM_BYTES", READ_BYTES) < READ_BYTES:
        HTTP11Connection.READ_NUM_BYTES = READ_BYTES


def fetch_file(
    target: FetchTarget,
    transfer: Transfer,
    stop: threading.Event,
    policy: FetchPolicy = FetchPolicy(),
    session: Any | None = None,
) -> str:
    """Download ``target`` into its partial file, resuming from what is there; returns the sha256 hex digest.

    Retries network errors, stalls, 429 and 5xx with exponential backoff (the count resets whenever bytes
    arrive). Raises ``DownloadError`` for what a retry cannot fix, ``DownloadStopped`` when ``stop`` is set.
    """
    if session is None:
        from huggingface_hub.utils import get_session

        session = get_session()
    _tune_reads()
    target.partial_path.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(target):
        part = _Partial(target.partial_path)
        try:
            return _fetch_loop(target, transfer, stop, policy, session, part)
        finally:
            part.hasher.close()


@contextlib.contextmanager
def _exclusive(target: FetchTarget) -> Iterator[None]:
    """Hold ``<partial>.lock`` so two processes (the window and a command) never append to one partial file."""
    with partial_lock(target.partial_path, target.label):
        yield


@contextlib.contextmanager
def partial_lock(partial_path: Path, label: str) -> Iterator[None]:
    """Hold ``<partial>.lock`` (flock) while writing or deleting ``partial_path``; raises ``DownloadError``
    (kind "busy") when another downloader holds it. The lock file is removed on release, while still locked;
    a process that opened it just before then sees that its file is no longer the one at the path, and retries.
    """
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks here; the sha256 check still catches a mix-up
        yield
        return
    lock_path = partial_path.with_name(partial_path.name + ".lock")
    while True:
        lock = lock_path.open("a")
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise DownloadError(
                f"{label} is being downloaded by another window or command right now; wait for it to finish, "
                "then try again.",
                reason="busy",
            ) from None
        if _same_file(lock, lock_path):
            break
        lock.close()  # its holder removed it after we opened it: lock the file now at the path
    try:
        yield
    finally:
        lock_path.unlink(missing_ok=True)
        lock.close()


def _same_file(lock: Any, lock_path: Path) -> bool:
    try:
        at_path, opened = os.stat(lock_path), os.fstat(lock.fileno())
    except FileNotFoundError:
        return False
    return (at_path.st_dev, at_path.st_ino) == (opened.st_dev, opened.st_ino)


def discard_partial(partial_path: Path) -> bool:
    """Delete a partial file unless a download writes it right now (this process or another); True when gone."""
    if not partial_path.exists():
        return True
    try:
        with partial_lock(partial_path, partial_path.name):
            partial_path.unlink(missing_ok=True)
    except DownloadError:
        return False
    return True


def _fetch_loop(
    target: FetchTarget, transfer: Transfer, stop: threading.Event, policy: FetchPolicy, session: Any, part: _Partial
) -> str:
    size = target.size_bytes
    if size is not None and part.offset > size:
        part.restart()
    transfer.done_bytes = transfer.durable_bytes = part.offset
    failures = 0
    while True:
        if stop.is_set():
            raise DownloadStopped
        if size is not None and part.offset == size:
            return str(part.hasher.hexdigest())
        before = part.offset
        try:
            _fetch_once(target, transfer, stop, policy, session, part)
            if size is None or part.offset == size:
                return str(part.hasher.hexdigest())
            if part.offset > size:
                part.restart()
                raise DownloadError(
                    f"{target.label}: the server sent more bytes than the Hub lists ({size:,}); "
                    "the partial file was removed. Retry later."
                )
            raise _Retryable(f"the connection closed at {part.offset:,} of {size:,} bytes")
        except _Retryable as exc:
            failures = 0 if part.offset > before else failures + 1
            if failures > policy.max_retries:
                raise DownloadError(
                    f"{target.label}: {exc}; gave up after {policy.max_retries} retries. The partial file is kept: "
                    "retry to continue.",
                    reason="network",
                ) from None
            delay = min(policy.backoff_s * 2 ** max(failures - 1, 0), MAX_BACKOFF_S)
            transfer.note = f"{exc}; retrying in {delay:.0f} s"
            if stop.wait(delay):
                raise DownloadStopped from None
            transfer.note = ""


def _fetch_once(
    target: FetchTarget, transfer: Transfer, stop: threading.Event, policy: FetchPolicy, session: Any, part: _Partial
) -> None:
    import httpx2

    headers = {**target.headers, "Accept-Encoding": "identity"}
    if part.offset:
        headers["Range"] = f"bytes={part.offset}-"
    timeout = httpx2.Timeout(policy.stall_s, connect=CONNECT_TIMEOUT_S)
    transfer.requests += 1
    try:
        with session.stream("GET", target.url, headers=headers, timeout=timeout, follow_redirects=True) as response:
            _check_status(target, response.status_code, part.offset)
            if response.status_code == 416:
                return
            if part.offset and (response.status_code != 206 or not _range_starts_at(response, part.offset)):
                part.restart()  # the server ignored the Range: start over
                transfer.done_bytes = transfer.durable_bytes = 0
            _write_stream(target, transfer, stop, response, part)
    except httpx2.TimeoutException:
        raise _Retryable(f"no data for {policy.stall_s:g} s (stalled)") from None
    except httpx2.TransportError as exc:
        raise _Retryable(f"connection lost ({type(exc).__name__})") from None


def _check_status(target: FetchTarget, status: int, offset: int) -> None:
    if status in (200, 206) or (status == 416 and offset and offset == target.size_bytes):
        return
    if status in (401, 403):
        raise DownloadError(
            f"{target.label}: the Hub refused access (HTTP {status}). The repository is gated or private: accept "
            "its license on its Hub page, then set a Hugging Face token (Settings, or `hf auth login`).",
            reason="auth",
        )
    if status == 404:
        raise DownloadError(
            f"{target.label}: the file is not on the Hub (HTTP 404). Check the name.", reason="not_found"
        )
    if status == 416:  # the partial file is at least as long as the file the server has now
        raise DownloadError(
            f"{target.label}: the file changed on the Hub (HTTP 416 at byte {offset:,}): cancel and download it again.",
            reason="changed",
        )
    if status == 429 or status >= 500:
        raise _Retryable(f"the server answered HTTP {status}")
    raise DownloadError(f"{target.label}: the server answered HTTP {status}.")


def _range_starts_at(response: Any, offset: int) -> bool:
    content_range = response.headers.get("Content-Range", "")  # "bytes 100-199/200"
    try:
        return int(content_range.split()[1].split("-")[0]) == offset
    except (IndexError, ValueError):
        return False


def _write_stream(
    target: FetchTarget, transfer: Transfer, stop: threading.Event, response: Any, part: _Partial
) -> None:
    unsynced = 0
    syncer = _Syncer(transfer)
    with part.path.open("ab", buffering=0) as f:  # unbuffered: a write error surfaces here
        try:
            for chunk in response.iter_raw():  # whatever arrived: a drop loses no received byte
                _write_all(f, chunk)
                part.hasher.update(chunk)
                part.offset += len(chunk)
                unsynced += len(chunk)
                transfer.done_bytes = part.offset
                transfer.last_byte_monotonic = time.monotonic()
                if unsynced >= FSYNC_EVERY_BYTES and syncer.idle():
                    syncer.start(f.fileno(), part.offset)  # in the background: writing goes on meanwhile
                    unsynced = 0
                if stop.is_set():
                    break
            syncer.join()
            os.fsync(f.fileno())
            transfer.durable_bytes = part.offset
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DownloadError(
                    f"{target.label}: the disk is full after {part.offset:,} bytes. The partial file is kept at "
                    f"{part.path}: free some space, then retry.",
                    reason="disk",
                ) from None
            raise
        finally:
            syncer.join()
    if stop.is_set():
        raise DownloadStopped


def _write_all(f: Any, chunk: bytes) -> None:
    view = memoryview(chunk)
    while view:
        view = view[f.write(view) :]


class _Syncer:
    """One fsync at a time on a helper thread; ``durable_bytes`` moves only once the bytes are on disk."""

    def __init__(self, transfer: Transfer) -> None:
        self.transfer = transfer
        self.thread: threading.Thread | None = None

    def idle(self) -> bool:
        return self.thread is None or not self.thread.is_alive()

    def start(self, fd: int, offset: int) -> None:
        self.thread = threading.Thread(target=self._sync, args=(fd, offset), name="fsync", daemon=True)
        self.thread.start()

    def _sync(self, fd: int, offset: int) -> None:
        try:
            os.fsync(fd)
            self.transfer.durable_bytes = max(self.transfer.durable_bytes, offset)
        except OSError:
            pass  # the final fsync in the writer reports a real failure

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()
