"""``llm-workstation hub search|files`` and ``download``: the Hugging Face Hub from the terminal.

``download`` shows a progress bar on stderr, prints the local path on stdout, and resumes from the partial file
when run again after an interruption. Exit codes: 0 done, 1 runtime failure, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from app.cli.common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, OPTION_HINTS, code_for, fail, fail_error, with_hint
from app.core.settings import SettingsError, load_settings
from app.core.units import MISSING, format_byte_rate, format_bytes, format_duration
from app.services.downloads.fetch import FetchPolicy, kind_of_reason
from app.services.downloads.hub import FORMATS, SORTS, HubError, HubService, resolve_token
from app.services.downloads.job_runner import JobControl, SpeedMeter, run_job
from app.services.downloads.jobs import DONE, DownloadJob
from app.services.paths import app_paths

VERBS = ("hub", "download")
BENCH_KINDS = ("download",)
BAR_WIDTH = 28


def add_parser(verbs: argparse._SubParsersAction) -> None:
    hub = verbs.add_parser("hub", help="search the Hugging Face Hub and list a repository's files")
    actions = hub.add_subparsers(dest="hub_action", metavar="ACTION", required=True)
    search = actions.add_parser("search", help="search models")
    search.add_argument("query")
    search.add_argument("--gguf", action="store_true", help="only repositories with GGUF files")
    search.add_argument("--format", choices=FORMATS, default=None, help="only this format")
    search.add_argument("--sort", choices=tuple(SORTS), default="downloads")
    search.add_argument("--limit", type=int, default=20)
    search.add_argument("--json", action="store_true", help="a JSON list of objects with at least 'id'")
    files = actions.add_parser("files", help="a repository's files, sizes and GGUF quantizations")
    files.add_argument("repo", help="owner/name")
    files.add_argument("--revision", default="main")
    files.add_argument("--json", action="store_true")
    download = verbs.add_parser("download", help="download a GGUF (or a quantization) or an HF-format folder")
    download.add_argument("repo", help="owner/name")
    download.add_argument("files", nargs="*", metavar="FILE", help="files to fetch (a split GGUF's shards come along)")
    download.add_argument("--quant", default=None, help="a GGUF quantization, e.g. Q4_K_M")
    download.add_argument("--dir", default=None, help="a models folder (default: the setting, else the HF cache)")
    download.add_argument("--revision", default="main")


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:
    bench = kinds.add_parser("download", help="download throughput against curl, and bytes re-fetched after a kill")
    bench.add_argument("--size-mb", type=int, default=1024)
    bench.add_argument("--runs", type=int, default=3, help="alternating runs of each (medians reported)")
    bench.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(app_paths().settings_file)
    except SettingsError as exc:
        return fail_error(exc)
    service = HubService(token=resolve_token(settings.hf_token))
    try:
        if args.verb == "download":
            return _download(service, args, args.dir if args.dir is not None else settings.download_dir)
        if args.hub_action == "search":
            return _search(service, args)
        return _files(service, args)
    except HubError as exc:  # bad input and not found exit 2, the Hub unreachable or refusing 1
        return fail_error(exc, {"files": f"`llm-workstation hub files {getattr(args, 'repo', 'REPO')}` lists them"})


def _search(service: HubService, args: argparse.Namespace) -> int:
    if args.limit < 1:
        return fail("--limit must be at least 1.", EXIT_BAD_INPUT)
    fmt = "gguf" if args.gguf else args.format
    results = service.search(args.query, fmt=fmt, sort=args.sort, limit=args.limit)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=1))
        return 0
    for r in results:
        gated = "  gated" if r.gated else ""
        print(f"{r.id:<60} {r.downloads or 0:>10,} downloads {r.likes or 0:>6,} likes{gated}")
    if not results:
        print("no models found", file=sys.stderr)
    return 0


def _files(service: HubService, args: argparse.Namespace) -> int:
    detail = service.repo_detail(args.repo, args.revision, with_card=False)
    if args.json:
        print(json.dumps(detail.to_dict(), indent=1))
        return 0
    print(f"{detail.id} @ {detail.commit[:12]}  license {detail.license or MISSING}{'  gated' if detail.gated else ''}")
    for f in detail.files:
        print(f"  {f.path:<70} {format_bytes(f.size_bytes):>10}")
    for c in detail.candidates:
        shards = f"  {len(c.files)}/{c.shard_count} shards" if c.shard_count > 1 else ""
        kind = "  projector" if c.is_projector else ""
        print(f"GGUF {c.quant or MISSING:<10} {format_bytes(c.size_bytes):>10}  {c.key}{shards}{kind}")
    return 0


def _download(service: HubService, args: argparse.Namespace, target_dir: str) -> int:
    if args.files and args.quant:
        return fail("Give either FILE names or --quant, not both.", EXIT_BAD_INPUT)
    detail = service.repo_detail(args.repo, args.revision, with_card=False)
    job = service.plan_download(detail, files=args.files, quant=args.quant, target_dir=target_dir)
    job.revision = args.revision
    ctl = JobControl(token=service.token, endpoint=service.endpoint, policy=FetchPolicy())
    worker = threading.Thread(target=run_job, args=(job, ctl), name="download", daemon=True)
    worker.start()
    try:
        _show_progress(job, ctl, worker)
    except KeyboardInterrupt:
        ctl.stop.set()
        worker.join(10)
        print(file=sys.stderr)
        return fail("interrupted; run the same command again to resume from the partial file", EXIT_INTERRUPTED)
    if job.state != DONE:  # the job keeps why it failed (its reason) for the window's list too
        hint = OPTION_HINTS["download_dir"] if job.error_kind == "disk" else None
        return fail(with_hint(job.error, hint), code_for(kind_of_reason(job.error_kind)))
    print(job.local_path)
    return 0


def _show_progress(job: DownloadJob, ctl: JobControl, worker: threading.Thread) -> None:
    meter = SpeedMeter()
    tty = sys.stderr.isatty()
    last_print = 0.0
    while worker.is_alive():
        worker.join(0.2)
        now = time.monotonic()
        if tty or now - last_print >= 5:  # a log file gets a line every 5 s, a terminal a live bar
            print(_bar(job, ctl, meter.speed(now, ctl.done_bytes), now), end="\r" if tty else "\n", file=sys.stderr)
            last_print = now
    print(_bar(job, ctl, 0.0, time.monotonic()), file=sys.stderr)


def _bar(job: DownloadJob, ctl: JobControl, speed: float, now: float) -> str:
    total, done = job.total_bytes, ctl.done_bytes
    fraction = done / total if total else 0.0
    filled = int(fraction * BAR_WIDTH)
    stalled = now - ctl.transfer.last_byte_monotonic > ctl.policy.stall_s / 2 and job.state != DONE
    eta = f"ETA {format_duration((total - done) / speed)}" if speed > 0 and total > done else ""
    status = "stalled" if stalled else ctl.transfer.note or f"{format_byte_rate(speed):>11} {eta}"
    return (
        f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {fraction:6.1%} {format_bytes(done)}/{format_bytes(total)} "
        f"{job.state:<11} {status}"
    )[:160].ljust(100)


def run_bench(args: argparse.Namespace) -> int:
    from app.devtools.download_bench import bench_download

    if args.size_mb < 1 or args.runs < 1:
        return fail("--size-mb and --runs must be at least 1.", EXIT_BAD_INPUT)
    try:
        report = bench_download(args.size_mb, args.runs)
    except (OSError, RuntimeError) as exc:
        return fail(f"the download benchmark failed: {exc}")
    print(json.dumps(report, indent=2) if args.json else "\n".join(_bench_lines(report)))
    return 0


def _bench_lines(r: dict[str, Any]) -> list[str]:
    return [
        f"file {r['size_bytes'] / 1e6:,.0f} MB from a local range-capable server on 127.0.0.1, {r['runs']} runs "
        "each, alternating (medians)",
        f"curl                      : {r['curl_mb_per_s']:8.1f} MB/s",
        f"app downloader (+sha256)  : {r['app_mb_per_s']:8.1f} MB/s",
        f"throughput ratio app/curl : {r['ratio']:.3f}   (target >= 0.9)",
        f"killed at                 : {r['killed_at_bytes'] / 1e6:,.1f} MB on disk "
        f"({r['served_before_kill_bytes'] / 1e6:,.1f} MB served)",
        f"resumed from byte         : {r['resumed_from_bytes']:,} (bytes on disk asked for again: "
        f"{r['refetched_on_disk_bytes']:,}; target 0)",
        f"re-fetched in all         : {r['refetched_bytes']:,} bytes = lost in flight at the kill (socket "
        f"buffers): {r['lost_in_flight_bytes']:,}",
        f"resumed file sha256 ok    : {r['sha256_ok']}",
    ]
