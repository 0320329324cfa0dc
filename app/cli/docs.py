"""``llm-workstation docs``: the document index — add files and folders to a collection, list, search, remove, and
watch a folder. Every action goes through the Workstation's documents service, as the window's Documents page does.

Exit codes: 0 done (``add`` also when some files could not be read: each is listed with its reason); 1 a runtime
failure; 2 bad input (a path that does not exist, an unknown collection, a folder never added); 130 interrupted
(Ctrl-C), what was committed before it kept — running ``docs add`` again resumes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from app.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, fail, fail_error

if TYPE_CHECKING:
    from app.services.documents.service import DocumentsService

VERBS = ("docs",)
DEFAULT_COLLECTION = "default"  # the store's DEFAULT_COLLECTION (not imported here: the CLI starts lighter)
MODES = ("auto", "keyword", "hybrid")


def add_parser(verbs: argparse._SubParsersAction) -> None:
    docs = verbs.add_parser("docs", help="your documents: index files and folders, search them")
    actions = docs.add_subparsers(dest="docs_action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="index files and folders (recursive) into a collection; resumable")
    add.add_argument("paths", nargs="+", metavar="PATH")
    add.add_argument("--collection", default=DEFAULT_COLLECTION, help="the collection (default: %(default)s)")
    add.add_argument("--types", default=None, metavar="EXT,...", help="only these file types, e.g. pdf,md,docx")
    add.add_argument("--timeout", type=float, default=120.0, help="seconds one file may take to parse")
    add.add_argument("--max-mb", type=float, default=200.0, help="skip files larger than this many MB")
    add.add_argument("--watch", action="store_true", help="watch the paths: the app keeps them indexed while it runs")
    listing = actions.add_parser("list", help="collections and their files: state, chunks, reasons")
    listing.add_argument("--collection", default=None)
    listing.add_argument("--json", action="store_true")
    search = actions.add_parser("search", help="search: the best passages with file and page")
    search.add_argument("query")
    search.add_argument("--collection", default=None, help="one collection (default: all)")
    search.add_argument("--top", type=int, default=5, help="how many passages (default: %(default)s)")
    search.add_argument(
        "--mode",
        choices=MODES,
        default="auto",
        help="keyword (BM25), hybrid (keywords and the embedding model's vectors), auto (hybrid where the "
        "vectors are there; default)",
    )
    search.add_argument("--json", action="store_true")
    remove = actions.add_parser("remove", help="drop a file or folder (every collection), or a whole collection")
    remove.add_argument("path", nargs="?", default=None, metavar="PATH")
    remove.add_argument("--collection", default=None, help="the collection to drop (with PATH: only from it)")
    watch = actions.add_parser("watch", help="watch an added folder (on) or stop (off): the app keeps it indexed")
    watch.add_argument("path", metavar="PATH")
    watch.add_argument("state", choices=("on", "off"))
    watch.add_argument("--collection", default=None, help="only in this collection (default: every one it is in)")


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:  # outside ``add`` (which stops cleanly on its own): nothing was being written
        return fail("interrupted", EXIT_INTERRUPTED)


async def _run(args: argparse.Namespace) -> int:
    from app.core.errors import AppError
    from app.services.paths import app_paths
    from app.services.workstation import Workstation

    workstation = Workstation.create(app_paths().ensure())
    service = workstation.documents
    service.watch_interval_s = None  # a command: the window follows watched folders, not this process
    try:
        action = {"add": _add, "list": _list, "search": _search, "remove": _remove, "watch": _watch}
        return await action[args.docs_action](service, args)
    except (AppError, ValueError) as exc:
        return fail_error(exc)
    finally:
        await workstation.close()


# --- add -----------------------------------------------------------------------------------------------------------
async def _add(service: DocumentsService, args: argparse.Namespace) -> int:
    from app.core.documents.file_types import parse_extensions
    from app.services.documents.indexer import IndexLimits
    from app.services.documents.scan import is_present

    for path in args.paths:
        if not is_present(path):
            return fail(f"no such file or folder: {path}", EXIT_BAD_INPUT)
    service.limits = IndexLimits(max_file_bytes=int(args.max_mb * 1e6), parse_timeout_s=args.timeout)
    extensions = parse_extensions(args.types) if args.types else None
    unsubscribe = service.subscribe(_progress)
    interrupted: list[bool] = []

    def stop() -> None:
        interrupted.append(True)
        service.cancel()

    with _ctrl_c(stop):
        totals = await service.index(args.paths, args.collection, extensions)
    unsubscribe()
    if interrupted or (totals is not None and totals.cancelled):
        print("stopped: what was indexed is kept; run the same command again to go on", file=sys.stderr)
        return EXIT_INTERRUPTED
    if totals is None:
        return EXIT_FAILED
    if args.watch:
        for path in args.paths:
            await service.watch(path, True, args.collection)
        print("watching: the app keeps these paths indexed while it runs (docs watch PATH off stops)", file=sys.stderr)
    return 0


@contextlib.contextmanager
def _ctrl_c(stop: Any) -> Any:
    """Ctrl-C (SIGINT) calls ``stop`` instead of raising, while inside (where the loop can take a signal handler)."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, stop)
    except (NotImplementedError, RuntimeError):  # Windows' loop: a KeyboardInterrupt ends the command instead
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)


def _progress(event: object) -> None:
    from app.services.documents import events as ev

    if isinstance(event, ev.IndexTotals):
        line = (
            f"done: {event.indexed} indexed ({event.chunks} chunks), {event.unchanged} unchanged, "
            f"{event.failed} failed, {event.removed} removed"
        )
    elif isinstance(event, ev.FileEvent):
        line = _event_line(event)
    else:
        return
    print(line, file=sys.stderr, flush=True)


def _event_line(event: object) -> str:
    from app.services.documents import events as ev

    assert isinstance(event, ev.FileEvent)
    where = f"[{event.position}/{event.total}] " if event.total else ""
    if event.kind == ev.INDEXED:
        pages = f", {event.pages} pages" if event.pages is not None else ""
        return f"{where}indexed {event.path} ({event.chunks} chunks{pages})"
    if event.kind == ev.FAILED:
        return f"{where}failed {event.path}: {event.reason}"
    return f"{where}{event.kind} {event.path}"


# --- list and search -----------------------------------------------------------------------------------------------
async def _known(service: DocumentsService, collection: str | None) -> bool:
    return collection is None or any(s.name == collection for s in await service.summaries())


async def _list(service: DocumentsService, args: argparse.Namespace) -> int:
    if not await _known(service, args.collection):
        return fail(f"no collection named {args.collection!r}", EXIT_BAD_INPUT)
    summaries = [s for s in await service.summaries() if args.collection in (None, s.name)]
    files = await service.files(args.collection)
    watched = await service.watched()
    if args.json:
        body = [
            {
                **asdict(summary),
                "file_count": summary.files,
                "files": [_file_json(f) for f in files if f.collection == summary.name],
                "watched": [w.path for w in watched if w.collection == summary.name],
            }
            for summary in summaries
        ]
        print(json.dumps({"collections": body}, indent=2))
        return 0
    for summary in summaries:
        print(f"{summary.name}: {summary.files} files, {summary.chunks} chunks ({summary.failed} failed)")
        for root in (w for w in watched if w.collection == summary.name):
            print(f"  watching {root.path}")
        for record in (f for f in files if f.collection == summary.name):
            detail = f"{record.chunk_count} chunks" if record.state == "indexed" else record.reason or record.state
            print(f"  {record.state:8} {record.path}  {detail}")
    if not summaries:
        print("no documents yet: llm-workstation docs add PATH")
    return 0


def _file_json(record: object) -> dict[str, object]:
    data = asdict(record)  # type: ignore[call-overload]
    return {key: data[key] for key in ("path", "state", "reason", "chunk_count", "pages", "size")}


async def _search(service: DocumentsService, args: argparse.Namespace) -> int:
    if args.top < 1:
        return fail("--top must be at least 1", EXIT_BAD_INPUT)
    if not await _known(service, args.collection):
        return fail(f"no collection named {args.collection!r}", EXIT_BAD_INPUT)
    hits, ranked_by = await service.search_with_mode(args.query, args.collection, args.top, mode=args.mode)
    if args.json:
        keys = ("path", "page", "heading", "text", "score", "snippet", "collection")
        hits_json = [{key: getattr(hit, key) for key in keys} for hit in hits]
        print(json.dumps({"mode": args.mode, "ranked_by": ranked_by, "hits": hits_json}, indent=2))
        return 0
    if args.mode == "hybrid" and ranked_by != "hybrid":
        print("llm-workstation: searched by keywords only (no embedding model chosen, or its vectors are not there "
              "yet)", file=sys.stderr)  # fmt: skip
    for number, hit in enumerate(hits, 1):
        page = f" p. {hit.page}" if hit.page is not None else ""
        print(f"{number}. {hit.path}{page}  (score {hit.score:.2f})\n   {hit.snippet.replace(chr(10), ' ')}")
    if not hits:
        print("no matches")
    return 0


# --- remove and watch ----------------------------------------------------------------------------------------------
async def _remove(service: DocumentsService, args: argparse.Namespace) -> int:
    from app.services.documents.scan import absolute

    if args.path is None and args.collection is None:
        return fail("give a PATH or --collection NAME", EXIT_BAD_INPUT)
    if not await _known(service, args.collection):
        return fail(f"no collection named {args.collection!r}", EXIT_BAD_INPUT)
    if args.path is None:
        count = await service.remove_collection(args.collection)
        print(f"removed collection {args.collection!r} ({count} files)")
        return 0
    store = await service.open()
    count = await asyncio.to_thread(store.remove_path, absolute(args.path), args.collection)
    if count == 0:
        return fail(f"not in the index: {args.path}", EXIT_BAD_INPUT)
    print(f"removed {count} file{'s' if count != 1 else ''}")
    return 0


async def _watch(service: DocumentsService, args: argparse.Namespace) -> int:
    if not await _known(service, args.collection):
        return fail(f"no collection named {args.collection!r}", EXIT_BAD_INPUT)
    roots = await service.watch(args.path, args.state == "on", args.collection)
    if not roots:
        return fail(f"not an added folder: {args.path} (docs add {args.path} --watch adds and watches it)",
                    EXIT_BAD_INPUT)  # fmt: skip
    for root in roots:
        what = "watching" if args.state == "on" else "no longer watching"
        print(f"{what} {root.path} (collection {root.collection!r})")
    if args.state == "on":
        print("the app keeps it indexed while it runs: new and changed files indexed, deleted ones dropped")
    return 0
