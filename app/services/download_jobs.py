"""Download jobs, where their files land (the HF cache layout or a models folder), and the persistent queue file."""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Job states, as the Downloads view shows them.
QUEUED, DOWNLOADING, STALLED, PAUSED, VERIFYING, DONE, FAILED = (
    "queued",
    "downloading",
    "stalled",
    "paused",
    "verifying",
    "done",
    "failed",
)
ACTIVE_STATES = (DOWNLOADING, STALLED, VERIFYING)


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
    state: str = QUEUED
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
        files = [JobFile(**f) for f in data.get("files", [])]
        return cls(**{**data, "files": files})


@dataclass(frozen=True)
class Placement:
    """Where one file is written while downloading, where it lands once verified, and the link users see."""

    partial_path: Path
    final_path: Path
    link_path: Path | None  # the snapshot symlink in the HF cache layout; None in a models folder

    @property
    def visible_path(self) -> Path:
        return self.link_path or self.final_path


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment now (huggingface_hub reads it at import)."""
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache).expanduser()
    if home := os.environ.get("HF_HOME"):
        return Path(home).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def repo_cache_dir(repo_id: str) -> Path:
    return hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))


def job_root(job: DownloadJob) -> Path:
    """The folder a job's files appear in: the snapshot folder of the cache, or ``<dir>/<org>/<name>``."""
    if job.target_dir:
        return Path(job.target_dir).expanduser() / Path(*job.repo_id.split("/"))
    return repo_cache_dir(job.repo_id) / "snapshots" / job.commit


def placement(job: DownloadJob, job_file: JobFile) -> Placement:
    root = job_root(job)
    visible = root / Path(*job_file.path.split("/"))
    if job.target_dir:
        return Placement(visible.with_name(visible.name + ".incomplete"), visible, None)
    blob = repo_cache_dir(job.repo_id) / "blobs" / (job_file.sha256 or job_file.blob_id or job.commit + job_file.path)
    return Placement(blob.with_name(blob.name + ".incomplete"), blob, visible)


def place(job: DownloadJob, where: Placement) -> Path:
    """Move a verified partial file into place (and link it from the snapshot); returns the visible path."""
    where.final_path.parent.mkdir(parents=True, exist_ok=True)
    if where.partial_path.exists():  # else the verified blob is already there (e.g. from another revision)
        os.replace(where.partial_path, where.final_path)
    if where.link_path is not None:
        where.link_path.parent.mkdir(parents=True, exist_ok=True)
        target = os.path.relpath(where.final_path, where.link_path.parent)
        where.link_path.unlink(missing_ok=True)
        where.link_path.symlink_to(target)
        if job.revision != job.commit:
            refs = repo_cache_dir(job.repo_id) / "refs" / job.revision
            refs.parent.mkdir(parents=True, exist_ok=True)
            refs.write_text(job.commit, encoding="utf-8")
    return where.visible_path


class JobStore:
    """The queue as a JSON file, replaced atomically on every save."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[DownloadJob]:
        """The saved jobs; an unreadable file is set aside (``.bad``) rather than losing the next save."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return [DownloadJob.from_dict(item) for item in data.get("jobs", [])]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            bad = self.path.with_suffix(".bad")
            try:
                self.path.replace(bad)
            except OSError as move_exc:  # start with an empty queue all the same: downloads still work
                log.warning("cannot read the download queue %s (%s) nor move it aside: %s", self.path, exc, move_exc)
            else:
                log.warning("cannot read the download queue %s (%s); it was moved to %s", self.path, exc, bad)
            return []

    def save(self, jobs: list[DownloadJob]) -> None:
        self.write([job.to_dict() for job in jobs])

    def write(self, jobs: list[dict[str, Any]]) -> None:
        """Replace the file with ``jobs`` (``DownloadJob.to_dict()`` copies), durably (fsync, then rename)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            json.dump({"version": 1, "jobs": jobs}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
