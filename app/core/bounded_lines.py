"""A file read a line at a time with a bound on each line and on the whole: for inputs that may be large (batch
files, earlier results) where reading everything at once, or one endless line, must not exhaust memory."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

from app.core.errors import InvalidInputError
from app.core.user_files import human_limit


class LinesError(InvalidInputError):
    """The stream as a whole cannot be read: over its total bound, or not UTF-8."""


class LineTooLong(Exception):
    """A line over the bound; it was skipped to its end (``number`` is its line number)."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number


_BREAK = re.compile(rb"\r\n?|\n")
_CHUNK = 1 << 20


class BoundedLines:
    """The lines of a binary stream, each with its line break (CR LF, LF or CR), read a chunk at a time.

    At most ``max_line`` bytes of a line are held: a longer one is skipped to its end and raises
    ``LineTooLong``. Keeps the number of the last line read and, for CSV, how many ``"`` the current record
    holds so far (``quotes``, reset by the reader at each record), long lines included.
    """

    def __init__(self, stream: BinaryIO, name: str, max_line: int, max_total: int | None) -> None:
        self._stream, self._name, self._max_line, self._max_total = stream, name, max_line, max_total
        self._buffer = b""
        self._pos = 0  # where the next line starts in _buffer
        self._searched = 0  # _buffer[_pos:_searched] holds no line break
        self._base = 0  # the file offset of _buffer[0]
        self._eof = False
        self.number = 0
        self.quotes = 0

    def _fill(self) -> None:
        """Drop what was read, then append a chunk (or note the end of the stream)."""
        self._buffer, self._base = self._buffer[self._pos :], self._base + self._pos
        self._searched -= self._pos
        self._pos = 0
        chunk = self._stream.read(_CHUNK)
        if self._max_total is not None and self._base + len(self._buffer) + len(chunk) > self._max_total:
            raise LinesError(f"{self._name} is larger than {human_limit(self._max_total)}; split it")
        self._eof = not chunk
        self._buffer += chunk

    def _break(self) -> re.Match[bytes] | None:
        """The next line break, once it is certain (a CR at the end of the buffer may be the start of CR LF)."""
        found = _BREAK.search(self._buffer, max(self._pos, self._searched))
        if found is not None and (found.end() < len(self._buffer) or self._eof or found.group() != b"\r"):
            return found
        self._searched = len(self._buffer) - (1 if found is not None else 0)
        return None

    def raw(self) -> bytes | None:
        """The next line's bytes with its break, or ``None`` at the end."""
        while (found := self._break()) is None:
            if self._searched - self._pos > self._max_line:  # no break in it (a CR at the end may be one)
                self._skip_long_line()
            if self._eof:
                if self._pos == len(self._buffer):
                    return None
                content_end = end = len(self._buffer)
                break
            self._fill()
        else:
            content_end, end = found.start(), found.end()
        start, self._pos, self._searched = self._pos, end, end
        line = self._buffer[start:end]
        self.number += 1
        self.quotes += line.count(b'"')
        if content_end - start > self._max_line:  # found in one go, with its break
            raise LineTooLong(self.number)
        return line

    def _skip_long_line(self) -> None:
        """Drop the rest of a line over the bound, a chunk at a time, and raise ``LineTooLong``."""
        while (found := self._break()) is None and not self._eof:
            self.quotes += self._buffer.count(b'"', self._pos, self._searched)
            self._pos = self._searched  # all but a CR at the very end, which may begin a CR LF
            self._fill()
        end = found.end() if found is not None else len(self._buffer)
        self.quotes += self._buffer.count(b'"', self._pos, end)
        self._pos = self._searched = end
        self.number += 1
        raise LineTooLong(self.number)

    def text(self) -> str | None:
        """The next line decoded (a UTF-8 byte order mark dropped from the first); ``LinesError`` when it is not
        UTF-8."""
        start = self._base + self._pos
        line = self.raw()
        if line is None:
            return None
        if start == 0 and line.startswith(b"\xef\xbb\xbf"):
            line, start = line[3:], 3
        try:
            return line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LinesError(
                f"{self._name} is not UTF-8 text (byte {start + exc.start}, line {self.number}); save it as UTF-8"
            ) from None

    def texts(self) -> Iterator[str]:
        while (line := self.text()) is not None:
            yield line
