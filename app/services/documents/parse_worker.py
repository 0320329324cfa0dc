"""The parse worker: a child process that extracts the text of one file at a time for the indexer.

``python -m app.services.documents.parse_worker --memory-bytes N``: its address space is capped at N bytes
(``RLIMIT_AS``), it reads one JSON request a line on stdin (``{"path", "kind"}``) and answers one JSON line on
stdout (``{"ok": true, "pages": [[text, page, [[offset, heading], …]], …]}`` or ``{"ok": false, "reason"}``). The
app bounds its wall time per file and kills it when that runs out; a crash in a parser's native code ends only this
process. The parsers are imported before it says it is ready, so a file's time bound is spent on that file."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from app.services.documents.failures import UnreadableFile, reason_for_os_error


def main(argv: list[str] | None = None) -> None:
    options = _options(argv)
    replies = _protocol_stdout()
    _limit_memory(options.memory_bytes)
    import docx  # noqa: F401  (imported now: not on the first file's clock)
    import pypdfium2  # noqa: F401

    from app.services.documents import parsers

    _send(replies, {"ready": True, "pid": os.getpid()})
    for line in sys.stdin:
        request = json.loads(line)
        _send(replies, _parse(parsers, Path(request["path"]), request["kind"], options.memory_bytes))


def _parse(parsers: Any, path: Path, kind: str, memory_bytes: int) -> dict[str, Any]:
    try:
        pages = parsers.parse_file(path, kind)
    except UnreadableFile as exc:
        return {"ok": False, "reason": str(exc)}
    except OSError as exc:
        return {"ok": False, "reason": reason_for_os_error(exc)}
    except MemoryError:
        return {"ok": False, "reason": f"ran out of memory (the limit is {memory_bytes // 2**20} MiB)"}
    except RecursionError:
        return {"ok": False, "reason": "too deeply nested to parse"}
    except Exception as exc:  # a parser's own bug or a malformed file it does not name
        return {"ok": False, "reason": f"the {kind} parser failed ({type(exc).__name__})"}
    return {"ok": True, "pages": [[page.text, page.page, page.headings] for page in pages]}


def _options(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="parse_worker")
    parser.add_argument("--memory-bytes", type=int, default=0, help="address-space limit (0: none)")
    return parser.parse_args(argv)


def _protocol_stdout() -> TextIO:
    """Stdout for the protocol alone: whatever a library prints goes to stderr."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return replies


def _limit_memory(memory_bytes: int) -> None:
    if memory_bytes <= 0:
        return
    try:
        import resource
    except ImportError:  # Windows: no rlimits; the time bound still holds
        return
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


def _send(stream: TextIO, message: dict[str, Any]) -> None:
    stream.write(json.dumps(message, ensure_ascii=False) + "\n")
    stream.flush()


if __name__ == "__main__":
    main()
