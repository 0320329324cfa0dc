"""Batch input: JSONL or CSV files read into OpenAI-style requests, with per-line problems, ordering, percentiles.

A JSONL line is ``{"id": …, "messages": [...]}`` (chat) or ``{"id": …, "prompt": "…"}`` (completion); every
other field on the line (``max_tokens``, ``temperature``, ``stop``, ``seed``, engine extras such as
``ignore_eos``…) is passed through to the server untouched. Lines in the OpenAI Batch API shape
(``{"custom_id": …, "body": {…}}``) are read too. A CSV needs a ``prompt`` column; ``id`` and the known
request fields (``max_tokens``, ``temperature``…) are optional columns. A line without an id is named
``line-N`` after its line number. A bad line is reported with its number and reason; the others still run.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from app.core import safe_json
from app.core.bounded_lines import BoundedLines, LinesError, LineTooLong
from app.core.errors import InvalidInputError
from app.core.user_files import MiB, UserFileError, human_limit, open_user_file

# OpenAI's Batch API takes input files of up to 200 MB. Every request is held in memory while a batch runs, so
# 1 GiB is the ceiling here: a larger batch is better split. The file is read a line at a time, bounded per line.
MAX_INPUT_BYTES = 1024 * MiB
MAX_LINE_BYTES = 16 * MiB  # one JSONL request (the JSON bound of safe_json)
CSV_FIELD_LIMIT = 16 * MiB  # characters in one CSV field (Python's csv module allows 128 KiB by default)
CSV_MAX_LINE_BYTES = 4 * CSV_FIELD_LIMIT  # a line holding a field at the limit, in UTF-8 at worst
MAX_RESULT_LINE_BYTES = 256 * MiB  # one line of an earlier run's output: the reply can be long

# The runner owns these: it always streams and asks for usage.
RUNNER_FIELDS = ("stream", "stream_options")
# Known request fields and the JSON types they take (checked on JSONL lines; coerced from CSV text).
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "max_tokens": (int,),
    "max_completion_tokens": (int,),
    "min_tokens": (int,),
    "temperature": (int, float),
    "top_p": (int, float),
    "top_k": (int,),
    "min_p": (int, float),
    "presence_penalty": (int, float),
    "frequency_penalty": (int, float),
    "repetition_penalty": (int, float),
    "seed": (int,),
    "n": (int,),
    "priority": (int,),
    "ignore_eos": (bool,),
    "stop": (str, list),
}
_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list"}


class BatchInputError(InvalidInputError):
    """The input file cannot be read at all (missing, not UTF-8, no prompt column); the message says why."""


@dataclass(frozen=True)
class BatchRequest:
    """One request: chat ``messages`` or a completion ``prompt``, plus the fields passed through as given."""

    id: str
    line: int
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    @property
    def prompt_chars(self) -> int:
        """Length of the prompt text in characters: the measure shortest-first ordering sorts by."""
        if self.prompt is not None:
            return len(self.prompt)
        return sum(_content_chars(m.get("content")) for m in self.messages or ())


@dataclass(frozen=True)
class InputProblem:
    """A line that will not run, with its 1-based line number in the input file."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass
class BatchInput:
    requests: list[BatchRequest] = field(default_factory=list)
    problems: list[InputProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _content_chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):  # OpenAI content parts: count the text ones
        return sum(len(p.get("text", "")) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return 0


def _type_problem(name: str, value: Any) -> str | None:
    allowed = FIELD_TYPES.get(name)
    if allowed is None:
        return None
    ok = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
    if name == "stop" and isinstance(value, list):
        ok = all(isinstance(s, str) for s in value)
    if not ok:
        return f"{name} must be {' or '.join(_TYPE_NAMES[t] for t in allowed)}, not {json.dumps(value)[:40]}"
    if name == "n" and value != 1:
        return "n must be 1: the batch runner writes one output per request"
    return None


def _messages_problem(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list"
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return f"messages[{index}] must be an object with a string role"
        if not isinstance(message.get("content"), str | list | None):
            return f"messages[{index}].content must be a string or a list of parts"
    return None


def _read_id(data: dict[str, Any], line: int) -> tuple[str | None, str | None]:
    """The request id (``line-N`` when absent) or a problem."""
    raw = data.pop("id", data.pop("custom_id", None))
    if raw is None:
        return f"line-{line}", None
    if isinstance(raw, bool) or not isinstance(raw, str | int) or raw == "":
        return None, "id must be a non-empty string or an integer"
    return str(raw), None


def request_from_object(data: Any, line: int) -> BatchRequest | InputProblem:
    """Check one decoded line; return the request or the reason it cannot run."""
    if not isinstance(data, dict):
        return InputProblem(line, "not a JSON object")
    data = dict(data)
    if "custom_id" in data and isinstance(data.get("body"), dict):  # OpenAI Batch API line
        data = {"custom_id": data["custom_id"], **data["body"]}
    request_id, problem = _read_id(data, line)
    messages, prompt = data.pop("messages", None), data.pop("prompt", None)
    if problem is None:
        problem = _body_problem(messages, prompt)
    for name in RUNNER_FIELDS:
        data.pop(name, None)
    for name, value in data.items():
        problem = problem or _type_problem(name, value)
    if problem or request_id is None:
        return InputProblem(line, problem or "no id")
    return BatchRequest(request_id, line, messages, prompt, data)


def _body_problem(messages: Any, prompt: Any) -> str | None:
    if messages is not None and prompt is not None:
        return "has both messages and prompt; give one"
    if messages is None and prompt is None:
        return 'no "messages" or "prompt" field'
    if messages is not None:
        return _messages_problem(messages)
    if not isinstance(prompt, str) or not prompt:
        return "prompt must be a non-empty string"
    return None


def _dedupe(found: Iterable[BatchRequest | InputProblem], result: BatchInput) -> BatchInput:
    first_line: dict[str, int] = {}
    for item in found:
        if isinstance(item, InputProblem):
            result.problems.append(item)
        elif item.id in first_line:
            result.problems.append(
                InputProblem(item.line, f"duplicate id {item.id!r} (first on line {first_line[item.id]})")
            )
        else:
            first_line[item.id] = item.line
            result.requests.append(item)
    return result


# --- reading files ------------------------------------------------------------------------------------------------
def _too_large_file(name: str) -> str:
    return (
        f"{name} is larger than {human_limit(MAX_INPUT_BYTES)}, more than one batch should hold "
        "(every request is kept in memory while it runs); split it into several files"
    )


def _jsonl_items(lines: BoundedLines) -> Iterator[BatchRequest | InputProblem]:
    while True:
        try:
            raw = lines.text()
        except LineTooLong as exc:
            yield InputProblem(exc.number, f"the line is longer than {human_limit(MAX_LINE_BYTES)}; shorten it")
            continue
        if raw is None:
            return
        if not raw.strip():
            continue
        try:
            data = safe_json.loads(raw, what="the line", max_bytes=None)  # the reader bounds the line
        except safe_json.JsonError as exc:  # "line 3: bad JSON: Expecting ...", "... nested too deeply ..."
            detail = str(exc).removeprefix("the line is ").removeprefix("not valid JSON: ")
            yield InputProblem(lines.number, f"bad JSON: {detail}")
            continue
        yield request_from_object(data, lines.number)


def _parse_jsonl(stream: BinaryIO, name: str) -> BatchInput:
    return _dedupe(_jsonl_items(BoundedLines(stream, name, MAX_LINE_BYTES, MAX_INPUT_BYTES)), BatchInput())


def _read(parse: Callable[[BinaryIO, str], BatchInput], stream: BinaryIO, name: str) -> BatchInput:
    """``parse(stream, name)``, with the errors that stop the whole file as ``BatchInputError``s."""
    try:
        return parse(stream, name)
    except LinesError as exc:
        raise BatchInputError(str(exc)) from None
    except OSError as exc:
        raise BatchInputError(f"cannot read {name}: {exc.strerror or exc}") from exc


def parse_jsonl(text: str) -> BatchInput:
    """Read JSONL text; blank lines are skipped, every other bad line becomes a problem."""
    return _read(_parse_jsonl, io.BytesIO(text.encode("utf-8")), "the input")


def _coerce_cell(name: str, text: str) -> Any:
    kinds = FIELD_TYPES[name]
    if bool in kinds:
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        return text
    for kind in (int, float):
        if kind in kinds:
            try:
                return kind(text)
            except ValueError:
                continue
    return text


_FIELD_LIMIT_LOCK = threading.Lock()


@contextlib.contextmanager
def _csv_field_limit() -> Iterator[None]:
    """``csv.field_size_limit`` is process-wide: it is raised to ``CSV_FIELD_LIMIT`` while one CSV is read and
    put back after. A csv reader in another thread meanwhile sees the higher limit (only more lenient); two
    batch reads take turns."""
    with _FIELD_LIMIT_LOCK:
        previous = csv.field_size_limit(CSV_FIELD_LIMIT)
        try:
            yield
        finally:
            csv.field_size_limit(previous)


def _csv_records(lines: BoundedLines) -> Iterator[tuple[int, list[str]] | InputProblem]:
    """The records of a CSV after its header, each with the number of its first line, or the problem with one.

    The reader is strict, so a quote left open is an error rather than rows run together. After an error the
    rest of the record is skipped: up to the line break where its quotes pair up (RFC 4180 doubles a quote
    inside a quoted field, so an open quote leaves an odd count)."""
    while True:
        reader = csv.reader(lines.texts(), strict=True)
        while True:
            start = lines.number + 1
            lines.quotes = 0
            try:
                row = next(reader)
            except StopIteration:
                return
            except (csv.Error, LineTooLong) as exc:
                open_at_end = _skip_rest_of_record(lines)
                yield InputProblem(start, _csv_reason(exc, start, lines.number, open_at_end))
                break  # the failed reader's state is spent: a new one for the next record
            yield start, row


def _skip_rest_of_record(lines: BoundedLines) -> bool:
    """Read on until the record's quotes pair up; True when the file ended with one still open."""
    while lines.quotes % 2:
        try:
            if lines.raw() is None:
                return True
        except LineTooLong:
            continue
    return False


def _csv_reason(exc: Exception, start: int, end: int, open_at_end: bool) -> str:
    span = f"lines {start}-{end}" if end > start else "this line"
    if open_at_end or "unexpected end of data" in str(exc):
        return (
            f"unterminated quote: the quoted field that opens here is never closed, so {span} ran together "
            "and did not run; close the quote"
        )
    if isinstance(exc, LineTooLong):
        return f"a line is longer than {human_limit(CSV_MAX_LINE_BYTES)}, so {span} did not run; shorten the row"
    if "field larger than field limit" in str(exc):
        return f"a field is longer than {CSV_FIELD_LIMIT:,} characters (16 Mi), so {span} did not run; shorten it"
    return f'bad CSV quoting ({exc}), so {span} did not run; write a " inside a quoted field twice ("")'


def _parse_csv(stream: BinaryIO, name: str, as_chat: bool) -> BatchInput:
    with _csv_field_limit():
        records = _csv_records(BoundedLines(stream, name, CSV_MAX_LINE_BYTES, MAX_INPUT_BYTES))
        first = next(records, None)
        if isinstance(first, InputProblem):
            raise BatchInputError(f"the CSV header row cannot be read: {first.reason}")
        header = [name.strip().lower() for name in first[1]] if first is not None else []
        if "prompt" not in header:
            raise BatchInputError('the CSV has no "prompt" column; its header row must name one (and optionally "id")')
        result = BatchInput()
        ignored = [name for name in header if name not in ("id", "prompt") and name not in FIELD_TYPES]
        if ignored:
            result.notes.append(f"CSV columns ignored (not a known request field): {', '.join(ignored)}")

        def items() -> Iterator[BatchRequest | InputProblem]:
            for record in records:
                if isinstance(record, InputProblem):
                    yield record
                    continue
                line, row = record
                if not any(cell.strip() for cell in row):
                    continue
                if len(row) != len(header):
                    yield InputProblem(line, f"has {len(row)} fields; the header has {len(header)}")
                    continue
                yield _csv_request(dict(zip(header, row, strict=True)), line, ignored, as_chat)

        return _dedupe(items(), result)


def parse_csv(text: str, as_chat: bool = False) -> BatchInput:
    """Read CSV text with a header row: ``prompt`` (required), ``id``, and known request fields as columns.

    ``as_chat`` turns each prompt into one user message (chat endpoint) instead of a completion prompt.
    Line numbers are those of the record's first line, so quoted multi-line fields are counted correctly.
    A field is at most ``CSV_FIELD_LIMIT`` characters; a longer one, a quote left open or other bad quoting
    is a problem on that row, and the other rows still run.
    """
    return _read(functools.partial(_parse_csv, as_chat=as_chat), io.BytesIO(text.encode("utf-8")), "the input")


def _csv_request(cells: dict[str, str], line: int, ignored: list[str], as_chat: bool) -> BatchRequest | InputProblem:
    prompt = cells.pop("prompt")
    data: dict[str, Any] = {k: _coerce_cell(k, v) for k, v in cells.items() if k not in ignored and k != "id" and v}
    if cells.get("id", "").strip():
        data["id"] = cells["id"].strip()
    if as_chat:
        data["messages"] = [{"role": "user", "content": prompt}]
    else:
        data["prompt"] = prompt
    return request_from_object(data, line)


@contextlib.contextmanager
def _open_input(path: Path, what: str) -> Iterator[BinaryIO]:
    """The file opened for streaming: a FIFO, a device or a file over ``MAX_INPUT_BYTES`` is refused up front."""
    try:
        stream = open_user_file(path, what=what)
    except UserFileError as exc:
        raise BatchInputError(str(exc)) from None
    except OSError as exc:
        raise BatchInputError(f"cannot read {what}: {exc.strerror or exc}") from exc
    with stream:
        if os.fstat(stream.fileno()).st_size > MAX_INPUT_BYTES:
            raise BatchInputError(_too_large_file(what))
        yield stream


def load_batch_input(path: str | Path, as_chat: bool = False) -> BatchInput:
    """Read a ``.csv`` file as CSV and anything else as JSONL, line by line; ``BatchInputError`` when the file
    cannot be read at all (missing, a FIFO or a device, over ``MAX_INPUT_BYTES``, not UTF-8, no prompt column).
    """
    path = Path(path)
    with _open_input(path, str(path)) as stream:
        if path.suffix.lower() == ".csv":
            return _read(functools.partial(_parse_csv, as_chat=as_chat), stream, str(path))
        return _read(_parse_jsonl, stream, str(path))


def read_finished_ids(path: Path) -> tuple[set[str], list[str]]:
    """Ids that finished without an error in an earlier run's output, and notes on what was repaired.

    A last line without its newline (the process died mid-write, or the machine lost power) is cut off.
    Raises BatchInputError when the file holds something other than batch results, or is a FIFO or a device.
    """
    what = f"the output file {path}"
    try:
        stream = open_user_file(path, what=what)
    except FileNotFoundError:
        return set(), []
    except UserFileError as exc:
        raise BatchInputError(str(exc)) from None
    except OSError as exc:
        raise BatchInputError(f"cannot read {what}: {exc.strerror or exc}") from exc
    with stream:  # streamed: only the ids are kept, however large the output has grown
        try:
            finished, complete = _finished_ids(BoundedLines(stream, what, MAX_RESULT_LINE_BYTES, None), path)
        except OSError as exc:
            raise BatchInputError(f"cannot read {what}: {exc.strerror or exc}") from exc
        size = os.fstat(stream.fileno()).st_size
    if complete >= size:
        return finished, []
    with path.open("r+b") as handle:
        handle.truncate(complete)
    return finished, [f"cut an incomplete last line from {path} (left by an interrupted run)"]


def _finished_ids(lines: BoundedLines, path: Path) -> tuple[set[str], int]:
    """The ids that finished, and the size of the file up to the end of its last complete line."""
    finished: set[str] = set()
    complete = 0
    while True:
        try:
            raw = lines.raw()
        except LineTooLong as exc:
            raise BatchInputError(f"{path} line {exc.number} is too long to be a batch result") from None
        if raw is None or not raw.endswith((b"\n", b"\r")):
            return finished, complete
        complete += len(raw)
        if not raw.strip():
            continue
        try:
            record = safe_json.loads(raw, what="a result", max_bytes=None)
        except safe_json.JsonError:
            record = None
        if not isinstance(record, dict) or "id" not in record:
            raise BatchInputError(
                f"{path} line {lines.number} is not a batch result; choose another output file or move that file away",
                setting="output",
            )
        if record.get("error") is None and isinstance(record["id"], str):
            finished.add(record["id"])


def shortest_first(requests: Sequence[BatchRequest]) -> list[BatchRequest]:
    """Requests sorted by prompt length in characters; equal lengths keep their input order."""
    return sorted(requests, key=lambda r: r.prompt_chars)


def length_priorities(requests: Sequence[BatchRequest]) -> dict[str, int]:
    """vLLM ``priority`` per id (lower runs first): the dense rank of prompt length, 0 for the shortest."""
    ranks = {length: rank for rank, length in enumerate(sorted({r.prompt_chars for r in requests}))}
    return {r.id: ranks[r.prompt_chars] for r in requests}


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile: the smallest value with at least ``pct``% of values at or below it; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def percentiles(values: Sequence[float], pcts: Sequence[int] = (50, 90, 99)) -> dict[str, float | None]:
    """``{"p50": …, "p90": …, "p99": …}`` by nearest rank."""
    return {f"p{p}": percentile(values, p) for p in pcts}
