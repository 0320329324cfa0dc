"""``llm-workstation docs``: the document index — add files and folders to a collection, list, search, remove.

Exit codes: 0 done (``add`` also when some files could not be read: each is listed with its reason); 1 a runtime
failure; 2 bad input (a path that does not exist, an unknown collection); 130 interrupted (Ctrl-C), what was
committed before it kept — running ``docs add`` again resumes."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from dataclasses import asdict

from app.cli.common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, fail

VERBS = ("docs",)
DEFAULT_COLLECTION = "default"  # the store's DEFAULT_COLLECTION (not imported here: the CLI starts lighter)


def add_parser(verbs: argparse._SubParsersAction) -> None:
    docs = verbs.add_parser("docs", help="your documents: index files and folders, search them")
    actions = docs.add_subparsers(dest="docs_action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="index files and folders (recursive) into a collection; resumable")
    add.add_argument("paths", nargs="+", metavar="PATH")
    add.add_argument("--collection", default=DEFAULT_COLLECTION, help="the collection (default: %(default)s)")
    add.add_argument("--types", default=None, metavar="EXT,...", help="only these file types, e.g. pdf,md,docx")
    add.add_argument("--timeout", type=float, default=120.0, help="seconds one file may take to parse")
    add.add_argument("--max-mb", type=float, default=200.0, help="skip files larger than this many MB")
    listing = actions.add_parser("list", help="collections and their files: state, chunks, reasons")
    listing.add_argument("--collection", default=None)
    listing.add_argument("--json", action="store_true")
    search = actions.add_parser("search", help="keyword search (BM25): the best passages with file and page")
    search.add_argument("query")
    search.add_argument("--collection", default=None, help="one collection (default: all)")
    search.add_argument("--top", type=int, default=5, help="how many passages (default: %(default)s)")
    search.add_argument("--json", action="store_true")
    remove = actions.add_parser("remove", help="drop a file or folder (every collection), or a whole collection")
    remove.add_argument("path", nargs="?", default=None, metavar="PATH")
    remove.add_argument("--collection", default=None, help="the collection to drop (with PATH: only from it)")


def run(args: argparse.Namespace) -> int:
    from app.services.documents.store import DocumentStore

    store = DocumentStore()
    try:
        action = {"add": _add, "list": _list, "search": _search, "remove": _remove}[args.docs_action]
        return action(store, args)
    finally:
        store.close()


def _add(store: object, args: argparse.Namespace) -> int:
    from app.core.documents.file_types import parse_extensions
    from app.services.documents.indexer import DocumentIndexer, IndexLimits
    from app.services.documents.scan import is_present

    for path in args.paths:
        if not is_present(path):
            return fail(f"no such file or folder: {path}", EXIT_BAD_INPUT)
    limits = IndexLimits(max_file_bytes=int(args.max_mb * 1e6), parse_timeout_s=args.timeout)
    indexer = DocumentIndexer(store, limits, listener=_progress)  # type: ignore[arg-type]
    extensions = parse_extensions(args.types) if args.types else None
    outcome: dict[str, object] = {}
    worker = threading.Thread(
        target=lambda: outcome.update(totals=indexer.add(args.paths, args.collection, extensions)), daemon=True
    )
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:
        indexer.cancel()
        worker.join()
        print("stopped: what was indexed is kept; run the same command again to go on", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        indexer.close()
    return 0 if "totals" in outcome else 1


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


def _list(store: object, args: argparse.Namespace) -> int:
    from app.services.documents.store import DocumentStore

    assert isinstance(store, DocumentStore)
    if args.collection is not None and store.find_collection(args.collection) is None:
        return fail(f"no collection named {args.collection!r}", EXIT_BAD_INPUT)
    summaries = [s for s in store.summaries() if args.collection in (None, s.name)]
    files = store.files(args.collection)
    if args.json:
        body = [
            {
                **asdict(summary),
                "file_count": summary.files,
                "files": [_file_json(f) for f in files if f.collection == summary.name],
            }
            for summary in summaries
        ]
        print(json.dumps({"collections": body}, indent=2))
        return 0
    for summary in summaries:
        print(f"{summary.name}: {summary.files} files, {summary.chunks} chunks ({summary.failed} failed)")
        for record in (f for f in files if f.collection == summary.name):
            detail = f"{record.chunk_count} chunks" if record.state == "indexed" else record.reason or record.state
            print(f"  {record.state:8} {record.path}  {detail}")
    if not summaries:
        print("no documents yet: llm-workstation docs add PATH")
    return 0


def _file_json(record: object) -> dict[str, object]:
    data = asdict(record)  # type: ignore[call-overload]
    return {key: data[key] for key in ("path", "state", "reason", "chunk_count", "pages", "size")}


def _search(store: object, args: argparse.Namespace) -> int:
    from app.services.documents.store import DocumentStore

    assert isinstance(store, DocumentStore)
    if args.top < 1:
        return fail("--top must be at least 1", EXIT_BAD_INPUT)
    if args.collection is not None and store.find_collection(args.collection) is None:
        return fail(f"no collection named {args.collection!r}", EXIT_BAD_INPUT)
    hits = store.search(args.query, args.collection, args.top)
    if args.json:
        keys = ("path", "page", "heading", "text", "score", "snippet", "collection")
        print(json.dumps({"hits": [{key: getattr(hit, key) for key in keys} for hit in hits]}, indent=2))
        return 0
    for number, hit in enumerate(hits, 1):
        page = f" p. {hit.page}" if hit.page is not None else ""
        print(f"{number}. {hit.path}{page}  (score {hit.score:.2f})\n   {hit.snippet.replace(chr(10), ' ')}")
    if not hits:
        print("no matches")
    return 0


def _remove(store: object, args: argparse.Namespace) -> int:
    from app.services.documents.scan import absolute
    from app.services.documents.store import DocumentStore

    assert isinstance(store, DocumentStore)
    if args.path is None and args.collection is None:
        return fail("give a PATH or --collection NAME", EXIT_BAD_INPUT)
    if args.collection is not None and store.find_collection(args.collection) is None:
        return fail(f"no collection named {args.collection!r}", EXIT_BAD_INPUT)
    if args.path is None:
        count = store.remove_collection(args.collection)
        print(f"removed collection {args.collection!r} ({count} files)")
        return 0
    count = store.remove_path(absolute(args.path), args.collection)
    if count == 0:
        return fail(f"not in the index: {args.path}", EXIT_BAD_INPUT)
    print(f"removed {count} file{'s' if count != 1 else ''}")
    return 0
