"""What the download service tells its listeners (on the services' loop)."""

from __future__ import annotations

from dataclasses import dataclass

from app.services.downloads.job_runner import JobView


@dataclass(frozen=True)
class DownloadsSnapshot:
    """Every job as it is now, in queue order, and why the queue file could not be written (None: it was)."""

    jobs: tuple[JobView, ...] = ()
    save_problem: str | None = None
    started: bool = False  # the saved queue has been read


@dataclass(frozen=True)
class DownloadsChanged:
    """The list, a job's state or its progress changed (progress: a few times a second while one runs)."""

    snapshot: DownloadsSnapshot


@dataclass(frozen=True)
class DownloadFinished:
    """A job's files are all verified and in place: ``local_path`` is the file (one-file job) or the folder."""

    job_id: str
    repo_id: str
    local_path: str


@dataclass(frozen=True)
class DownloadFailed:
    """A job stopped for good until retried; ``message`` says why and what to do."""

    job_id: str
    message: str


DownloadEvent = DownloadsChanged | DownloadFinished | DownloadFailed
