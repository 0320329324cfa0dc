"""Batch input: JSONL or CSV files read into OpenAI-style requests, with per-line problems, ordering, percentiles.

A JSONL line is ``{"id": …, "messages": [...]}`` (chat) or ``{"id": …, "prompt": "…"}`` (completion); every
other field on the line (``max_tokens``, ``temperature``, ``stop``, ``seed``, engine extras such as
``ignore_eos``…) is passed through to the server untouched. Lines in the OpenAI Batch API shape
(``{"custom_id": …, "body": {…}}``) are read too. A CSV needs a ``prompt`` column; ``id`` and the known
request fields (``max_tokens``, ``temperature``…) are optional columns. A line without an id is named
``line-N`` after its line number. A bad line is reported with its number and reason; the others still run.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


class BatchInputError(ValueError):
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


def parse_jsonl(text: str) -> BatchInput:
    """Read JSONL text; blank lines are skipped, every other bad line becomes a problem."""

    def items() -> Iterable[BatchRequest | InputProblem]:
        for number, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except ValueError as exc:
                yield InputProblem(number, f"bad JSON: {exc}")
                continue
            yield request_from_object(data, number)

    return _dedupe(items(), BatchInput())


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


def parse_csv(text: str, as_chat: bool = False) -> BatchInput:
    """Read CSV text with a header row: ``prompt`` (required), ``id``, and known request fields as columns.

    ``as_chat`` turns each prompt into one user message (chat endpoint) instead of a completion prompt.
    Line numbers are those of the record's first line, so quoted multi-line fields are counted correctly.
    """
    reader = csv.reader(io.StringIO(text, newline=""))
    header = [name.strip().lower() for name in next(reader, [])]
    if "prompt" not in header:
        raise BatchInputError('the CSV has no "prompt" column; its header row must name one (and optionally "id")')
    result = BatchInput()
    ignored = [name for name in header if name not in ("id", "prompt") and name not in FIELD_TYPES]
    if ignored:
        result.notes.append(f"CSV columns ignored (not a known request field): {', '.join(ignored)}")

    def items() -> Iterable[BatchRequest | InputProblem]:
        start = reader.line_num + 1
        for row in reader:
            line, start = start, reader.line_num + 1
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                yield InputProblem(line, f"has {len(row)} fields; the header has {len(header)}")
                continue
            yield _csv_request(dict(zip(header, row, strict=True)), line, ignored, as_chat)

    try:
        return _dedupe(items(), result)
    except csv.Error as exc:
        raise BatchInputError(f"the CSV cannot be read past line {reader.line_num}: {exc}") from exc


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


def load_batch_input(path: str | Path, as_chat: bool = False) -> BatchInput:
    """Read a ``.csv`` file as CSV and anything else as JSONL; ``BatchInputError`` when unreadable."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise BatchInputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise BatchInputError(f"{path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from exc
    if path.suffix.lower() == ".csv":
        return parse_csv(text, as_chat=as_chat)
    return parse_jsonl(text)


def read_finished_ids(path: Path) -> tuple[set[str], list[str]]:
    """Ids that finished without an error in an earlier run's output, and notes on what was repaired.

    A last line without its newline (the process died mid-write, or the machine lost power) is cut off.
    Raises BatchInputError when the file holds something other than batch results.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set(), []
    except OSError as exc:
        raise BatchInputError(f"cannot read the output file {path}: {exc.strerror or exc}") from exc
    notes = []
    if data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
        with path.open("r+b") as handle:
            handle.truncate(len(data))
        notes.append(f"cut an incomplete last line from {path} (left by an interrupted run)")
    finished: set[str] = set()
    for number, raw in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        try:
            record = json.loads(raw) if raw.strip() else {"id": None, "error": "blank"}
        except ValueError:
            record = None
        if not isinstance(record, dict) or "id" not in record:
            raise BatchInputError(
                f"{path} line {number} is not a batch result; choose another --output or move that file away"
            )
        if record.get("error") is None and isinstance(record["id"], str):
            finished.add(record["id"])
    return finished, notes


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
