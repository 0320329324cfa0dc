"""An in-memory, secret-redacting log buffer for the log viewer, and the app's logging setup."""

from __future__ import annotations

import contextlib
import io
import logging
import logging.handlers
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

APP_LOGGER = "app"
DEFAULT_CAPACITY = 5000
LOG_FILE_MAX_BYTES = 1_000_000
LOG_FILE_BACKUPS = 3
REDACTED = "[REDACTED]"

_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Hugging Face access tokens.
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), "hf_" + REDACTED),
    # HTTP bearer tokens, e.g. "Authorization: Bearer abc.def" (8+ characters, so prose survives).
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9\-._~+/]{8,}=*"), r"\1" + REDACTED),
    # api_key=..., api-key: ..., "apikey": "..." (quotes kept, value dropped).
    (re.compile(r"""(?i)\b(api[_-]?key["']?\s*[=:]\s*["']?)[^\s"'&,;)}\]]+"""), r"\1" + REDACTED),
)


def redact(text: str) -> str:
    """Replace access tokens, bearer tokens and API keys in ``text`` with a placeholder."""
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


@dataclass(frozen=True)
class LogEntry:
    """One formatted, redacted log record. ``seq`` increases by one per record the buffer accepts."""

    seq: int
    created: float
    levelno: int
    level: str
    logger: str
    message: str

    def format(self) -> str:
        """The entry as one (possibly multi-line) log line."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.created))
        millis = int(self.created * 1000) % 1000
        return f"{stamp}.{millis:03d} {self.level:<8} {self.logger}: {self.message}"


Subscriber = Callable[[LogEntry], None]


class RedactingFormatter(logging.Formatter):
    """A formatter whose output, traceback included, never holds a secret."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def _message_of(record: logging.LogRecord) -> str:
    """The record's message with its traceback (if any), like a formatter would render it."""
    message = record.getMessage()
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        message = f"{message}\n{record.exc_text}"
    if record.stack_info:
        message = f"{message}\n{record.stack_info}"
    return message


class LogBuffer(logging.Handler):
    """A thread-safe ring buffer of the last ``capacity`` log records, with live subscribers.

    Subscribers are called with each new :class:`LogEntry` on the thread that logged it. Once
    :meth:`unsubscribe` returns, the callback is not running and will not be called again.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._entries: deque[LogEntry] = deque(maxlen=capacity)
        self._subscribers: list[Subscriber] = []
        # Re-entrant: a subscriber may log or unsubscribe from inside its callback.
        self._state_lock = threading.RLock()
        self._next_seq = 1

    @property
    def capacity(self) -> int:
        """How many records the buffer keeps before dropping the oldest."""
        return self._entries.maxlen or 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = redact(_message_of(record))
        except Exception:
            self.handleError(record)
            return
        with self._state_lock:
            entry = LogEntry(self._next_seq, record.created, record.levelno, record.levelname, record.name, message)
            self._next_seq += 1
            self._entries.append(entry)
            for callback in list(self._subscribers):
                _notify(callback, entry)

    def records(self) -> list[LogEntry]:
        """A snapshot of the buffered entries, oldest first."""
        with self._state_lock:
            return list(self._entries)

    def clear(self) -> None:
        """Drop every buffered entry (sequence numbers keep increasing)."""
        with self._state_lock:
            self._entries.clear()

    def subscribe(self, callback: Subscriber) -> None:
        """Call ``callback(entry)`` for every new record, on the logging thread."""
        with self._state_lock:
            if callback not in self._subscribers:
                self._subscribers.append(callback)

    def unsubscribe(self, callback: Subscriber) -> None:
        """Stop calling ``callback``; unknown callbacks are ignored."""
        with self._state_lock:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

    def subscriber_count(self) -> int:
        """How many callbacks are subscribed."""
        with self._state_lock:
            return len(self._subscribers)


def _notify(callback: Subscriber, entry: LogEntry) -> None:
    # A failing subscriber must not break logging; logging the failure could recurse, so stay silent.
    with contextlib.suppress(Exception):
        callback(entry)


class _RedactingFileHandler(logging.handlers.RotatingFileHandler):
    """The app's log file: rotated at 1 MB, three backups, redacted, readable by its owner only."""

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, 0o600)  # a log left by an earlier version was 0644
            return io.TextIOWrapper(open(fd, "ab"), encoding=self.encoding, errors=self.errors)
        except BaseException:
            os.close(fd)
            raise


def install_logging(level: str | int = "INFO", log_file: Path | None = None) -> LogBuffer:
    """Attach a :class:`LogBuffer` (and, with ``log_file``, a rotating file) to the ``app`` logger.

    Calling it again reuses the installed buffer, applies the new level and swaps the file
    handler only when the file changes, so handlers are never doubled. The root logger is untouched.
    """
    logger = logging.getLogger(APP_LOGGER)
    logger.setLevel(level.upper() if isinstance(level, str) else level)
    buffer = next((h for h in logger.handlers if isinstance(h, LogBuffer)), None)
    if buffer is None:
        buffer = LogBuffer()
        logger.addHandler(buffer)
    _install_file_handler(logger, log_file)
    return buffer


def _install_file_handler(logger: logging.Logger, log_file: Path | None) -> None:
    wanted = str(Path(log_file).resolve()) if log_file is not None else None
    for handler in [h for h in logger.handlers if isinstance(h, _RedactingFileHandler)]:
        if handler.baseFilename == wanted:
            return
        logger.removeHandler(handler)
        handler.close()
    if log_file is None:
        return
    Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    handler = _RedactingFileHandler(
        log_file, maxBytes=LOG_FILE_MAX_BYTES, backupCount=LOG_FILE_BACKUPS, encoding="utf-8", delay=True
    )
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)-8s %(name)s: %(message)s"))
    logger.addHandler(handler)


def uninstall_logging() -> None:
    """Remove and close the handlers :func:`install_logging` added (for shutdown and tests)."""
    logger = logging.getLogger(APP_LOGGER)
    for handler in [h for h in logger.handlers if isinstance(h, LogBuffer | _RedactingFileHandler)]:
        logger.removeHandler(handler)
        handler.close()
