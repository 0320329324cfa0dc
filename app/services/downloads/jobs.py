"""Download jobs, where their files land (the HF cache layout or a models folder), and the persistent queue file."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from app.core import remote_paths as rp
from app.core.safe_json import load_file
from app.services.library.hf_cache import REPO_PREFIX, hf_hub_cache_dir
from app.services.paths import open_private

log = logging.getLogger(__name__)


class JobState(StrEnum):
    """A job's state, as the Downloads view shows it; the value is what the queue file stores."""

    QUEUED = "queued"
    DOWNLOADING = "downloading"
    STALLED = "stalled"
    PAUSED = "paused"
    VERIFYING = "verifying"
    DONE = "done"
    FAILED = "failed"


QUEUED, DOWNLOADING, STALLED, PAUSED = JobState.QUEUED, JobState.DOWNLOADING, JobState.STALLED, JobState.PAUSED
VERIFYING, DONE, FAILED = JobState.VERIFYING, JobState.DONE, JobState.FAILED
ACTIVE_STATES = (DOWNLOADING, STALLED, VERIFYING)
STATES = tuple(JobState)
MAX_BAD_COPIES = 100  # downloads.bad, downloads.bad.1, ...: set-aside queue files kept before giving up


@dataclass
class JobFile:
    """One file of a job: its repository path, listed size, LFS sha256 (None for small git files) and blob id."""

    path: str
    size_bytes: int | None
    sha256: str | None = None
    blob_id: str | None = None
    done: bool = False
    done_bytes: int = 0  # durable bytes (fsynced) the last time the queue was saved


@dataclass
class DownloadJob:
    """One or more files of one repository at one commit, downloaded and placed together."""

    repo_id: str
    commit: str
    files: list[JobFile]
    revision: str = "main"
    target_dir: str = ""  # empty: the Hugging Face cache
    state: JobState = QUEUED
    error: str = ""
    error_kind: str = ""
    local_path: str = ""  # the file (one-file job) or folder the result is in, once done
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    created: float = field(default_factory=time.time)

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes or 0 for f in self.files)

    @property
    def title(self) -> str:
        names = [f.path for f in self.files]
        return f"{self.repo_id}: {names[0]}" if len(names) == 1 else f"{self.repo_id} ({len(names)} files)"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DownloadJob:
        """A job from ``to_dict()``'s copy; raises ``TypeError``/``ValueError`` for a field of the wrong type."""
        files = _typed(data, {}).get("files")
        if not isinstance(files, list) or not files:
            raise ValueError("a download job without files")
        job = cls(**{**data, "files": [JobFile(**_typed(f, _FILE_TYPES)) for f in files]})
        _typed(asdict(job), _JOB_TYPES)
        if job.state not in STATES:
            raise ValueError(f"unknown download state {rp.shown(job.state)}")
        job.state = JobState(job.state)
        return job

    def check_paths(self, origin: rp.Origin = rp.QUEUE) -> None:
        """Raise ``RemotePathError`` unless every remote value that becomes a path is safe."""
        rp.repo_id(self.repo_id, origin)
        rp.commit_id(self.commit, origin)
        rp.revision(self.revision, origin)
        for f in self.files:
            rp.repo_file(f.path, origin)
            rp.sha256_hex(f.sha256, origin)
            rp.blob_id(f.blob_id, origin)


_OPT_STR = (str, type(None))
_OPT_INT = (int, type(None))
_FILE_TYPES: dict[str, tuple[type, ...]] = {
    "path": (str,),
    "size_bytes": _OPT_INT,
    "sha256": _OPT_STR,
    "blob_id": _OPT_STR,
    "done": (bool,),
    "done_bytes": (int,),
}
_JOB_TYPES: dict[str, tuple[type, ...]] = {
    **{
        name: (str,)
        for name in ("repo_id", "commit", "revision", "target_dir", "state", "error", "error_kind", "local_path", "id")
    },
    "files": (list,),
    "created": (int, float),
}


def _typed(data: Any, types: dict[str, tuple[type, ...]]) -> dict[str, Any]:
    """``data`` when it is a dict whose known fields have the right types (a bool is not a number here)."""
    if not isinstance(data, dict):
        raise TypeError(f"expected an object, not {type(data).__name__}")
    for name, allowed in types.items():
        value = data.get(name)
        if name in data and (not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)):
            raise TypeError(f"{name} is {type(value).__name__}")
    return data


@dataclass(frozen=True)
class Placement:
    """Where one file is written while downloading, where it lands once verified, and the link users see."""

    partial_path: Path
    final_path: Path
    link_path: Path | None  # the snapshot symlink in the HF cache layout; None in a models folder

    @property
    def visible_path(self) -> Path:
        return self.link_path or self.final_path


def repo_cache_dir(repo_id: str, origin: rp.Origin = rp.QUEUE) -> Path:
    return hf_hub_cache_dir() / (REPO_PREFIX + rp.repo_id(repo_id, origin).replace("/", "--"))


def job_root(job: DownloadJob) -> Path:
    """The folder a job's files appear in: the snapshot folder of the cache, or ``<dir>/<org>/<name>``.

    Every remote value in the path is checked again here (the queue file may have been edited by hand)."""
    if job.target_dir:
        return Path(job.target_dir).expanduser() / Path(*rp.repo_id(job.repo_id, rp.QUEUE).split("/"))
    return repo_cache_dir(job.repo_id) / "snapshots" / rp.commit_id(job.commit, rp.QUEUE)


def placement(job: DownloadJob, job_file: JobFile) -> Placement:
    """Where ``job_file`` goes; raises ``RemotePathError`` when any of it would leave the job's folders."""
    root = job_root(job)
    name = rp.repo_file(job_file.path, rp.QUEUE)
    visible = root / Path(*name.split("/"))
    rp.inside(root, visible)
    if job.target_dir:
        return Placement(visible.with_name(visible.name + ".incomplete"), visible, None)
    blobs = repo_cache_dir(job.repo_id) / "blobs"
    blob = blobs / _blob_name(job, job_file)
    rp.inside(blobs, blob)
    return Placement(blob.with_name(blob.name + ".incomplete"), blob, visible)


def _blob_name(job: DownloadJob, job_file: JobFile) -> str:
    """The blob's file name: the LFS sha256 or the git blob id (both checked hex), else a hash of commit/path."""
    if named := rp.sha256_hex(job_file.sha256, rp.QUEUE) or rp.blob_id(job_file.blob_id, rp.QUEUE):
        return named
    return hashlib.sha1(f"{job.commit}/{job_file.path}".encode()).hexdigest()


def place(job: DownloadJob, where: Placement) -> Path:
    """Move a verified partial file into place (and link it from the snapshot); returns the visible path.

    Only paths inside the job's folders are replaced or unlinked: the file inside ``<dir>/<org>/<name>``, or the
    blob inside ``blobs/``, its link inside the snapshot folder and the ref inside ``refs/``."""
    root = job_root(job)
    final_root = root if where.link_path is None else _blobs(job)
    final, partial = where.final_path, where.partial_path
    rp.inside(final_root, final)
    rp.inside(final_root, partial)
    final.parent.mkdir(parents=True, exist_ok=True)
    if partial.exists():  # else the verified blob is already there (e.g. from another revision)
        os.replace(partial, final)
    if where.link_path is not None:
        link = where.link_path
        rp.inside(root, link)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(os.path.relpath(final, link.parent))
        if job.revision != job.commit:
            _write_ref(job)
    return where.visible_path


def _blobs(job: DownloadJob) -> Path:
    return repo_cache_dir(job.repo_id) / "blobs"


def _write_ref(job: DownloadJob) -> None:
    """``refs/<revision>`` holds the commit, as huggingface_hub writes it (``refs/pr/1`` → ``refs/refs/pr/1``)."""
    refs_root = repo_cache_dir(job.repo_id) / "refs"
    name = rp.revision(job.revision, rp.QUEUE)
    refs = refs_root / Path(*name.split("/"))
    rp.inside(refs_root, refs)
    refs.parent.mkdir(parents=True, exist_ok=True)
    refs.write_text(rp.commit_id(job.commit, rp.QUEUE), encoding="utf-8")


def _fail_if_unsafe(job: DownloadJob) -> None:
    if job.state == DONE:
        return
    try:
        job.check_paths(rp.QUEUE)
    except rp.RemotePathError as exc:
        log.warning("download %s: %s", job.id, exc)
        job.state, job.error, job.error_kind = FAILED, str(exc), "bad_input"


class JobStore:
    """The queue as a JSON file, replaced atomically on every save."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[DownloadJob]:
        """The saved jobs; an unreadable file is set aside (``.bad``, ``.bad.1``, ...) rather than losing the next
        save. A job whose paths are unsafe (the file was edited) is kept, failed, with the reason."""
        try:
            data = load_file(self.path, what=f"the download queue {self.path}")
            items = data.get("jobs", []) if isinstance(data, dict) else None
            if not isinstance(items, list):
                raise TypeError("no list of jobs")
            jobs = [DownloadJob.from_dict(item) for item in items]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, TypeError) as exc:  # safe_json's and user_files' errors are ValueErrors
            self._set_aside(exc)
            return []
        for job in jobs:
            _fail_if_unsafe(job)
        return jobs

    def _set_aside(self, exc: Exception) -> None:
        """Move the unreadable file to the first free ``.bad`` name: an earlier copy is never replaced."""
        try:
            bad = self._free_bad_name()
            self.path.rename(bad)
        except OSError as move_exc:  # start with an empty queue all the same: downloads still work
            log.warning("cannot read the download queue %s (%s) nor move it aside: %s", self.path, exc, move_exc)
        else:
            log.warning("cannot read the download queue %s (%s); it was moved to %s", self.path, exc, bad)

    def _free_bad_name(self) -> Path:
        base = self.path.with_suffix(".bad")
        for n in range(MAX_BAD_COPIES):
            bad = base if n == 0 else base.with_name(f"{base.name}.{n}")
            if not os.path.lexists(bad):
                return bad
        raise OSError(f"{base} and {MAX_BAD_COPIES - 1} numbered copies exist already; delete some")

    def save(self, jobs: list[DownloadJob]) -> None:
        self.write([job.to_dict() for job in jobs])

    def write(self, jobs: list[dict[str, Any]]) -> None:
        """Replace the file with ``jobs`` (``DownloadJob.to_dict()`` copies), durably (fsync, then rename)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open_private(tmp) as f:  # owner-only
            json.dump({"version": 1, "jobs": jobs}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
