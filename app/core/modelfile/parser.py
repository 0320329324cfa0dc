"""Ollama Modelfiles: a parser and a writer that behave like Ollama's own (``parser/parser.go``).

The parser is a port of Ollama's rune-level state machine, quirks included:

- keywords are ASCII letters, matched case-insensitively, and must be followed by a space or a tab;
- ``#`` starts a comment only where an instruction could start; there are no inline comments;
- a value runs to the end of its line and is trimmed; ``"..."`` and ``\"\"\"...\"\"\"`` may span lines and only
  close at a line end; there are no escapes;
- runes that Go's ``strconv.IsPrint`` rejects (controls, NBSP, U+3000, ...) are dropped, except the space, tab,
  CR and LF that a value keeps;
- line numbers count every CR and every LF, so CRLF files report about twice the line number.

Bytes are decoded as Ollama decodes a file: a UTF-16 (LE or BE) or UTF-8 byte order mark wins, anything
else is UTF-8. A ``str`` is taken as already decoded text; a leading U+FEFF is dropped as a UTF-8 BOM would be.

Printability follows the Unicode tables of the Go release Ollama is built with (Go 1.26: Unicode 15.0.0), not
the ones of the running Python, so text such as a new emoji is kept or dropped exactly as Ollama does it.
"""

from __future__ import annotations

import bisect
import codecs
import enum
import functools
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from app.core.errors import InvalidInputError
from app.core.user_files import MiB, read_user_bytes

__all__ = [
    "INSTRUCTIONS",
    "MAX_MODELFILE_BYTES",
    "NON_PARAMETER_NAMES",
    "Command",
    "Modelfile",
    "ModelfileError",
    "parse_modelfile",
    "quote",
    "read_modelfile",
]

# Modelfiles are short text: a FROM line, a template of a few KiB, a licence of a few dozen KiB at most. 1 MiB is
# far above any real one and still parses in a small fraction of a second; a larger file is not a Modelfile.
MAX_MODELFILE_BYTES = 1 * MiB


class ModelfileError(InvalidInputError):
    """A Modelfile Ollama would refuse (``str(e)`` is Ollama's own text), or a value no Modelfile can hold."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class Command:
    """One instruction as Ollama stores it: ``FROM`` is ``model``, a PARAMETER is its raw name."""

    name: str
    args: str


# The keywords in the order Ollama's error message names them.
_KEYWORDS = (
    "from",
    "license",
    "template",
    "system",
    "adapter",
    "draft",
    "renderer",
    "parser",
    "parameter",
    "message",
    "requires",
)
INSTRUCTIONS: tuple[str, ...] = tuple(k.upper() for k in _KEYWORDS)

# Command names Ollama writes back as ``KEYWORD value`` (``Command.String``).
_NAMED = ("license", "template", "system", "adapter", "renderer", "parser", "requires", "draft")
# Every command name that is not a PARAMETER when Ollama builds a create request.
NON_PARAMETER_NAMES: frozenset[str] = frozenset(("model", "message", *_NAMED))
_NOT_PARAMETERS = NON_PARAMETER_NAMES
_ROLES = ("system", "user", "assistant")

_INVALID_COMMAND = "command must be one of " + ", ".join(f'"{k}"' for k in _KEYWORDS[:-1]) + f', or "{_KEYWORDS[-1]}"'
_INVALID_ROLE = 'message role must be one of "system", "user", or "assistant"'
_MISSING_FROM = "no FROM line"
_UNEXPECTED_EOF = "unexpected EOF"

_SPACE = " \t"
_NEWLINE = "\r\n"
_BLANK = " \t\r\n"
_PARAMETER_NAME = re.compile(r"[A-Za-z0-9_]*")


# --- decoding --------------------------------------------------------------------------------------------------
def _one_replacement_per_byte(error: UnicodeError) -> tuple[str, int]:
    """Go's ``bufio.Reader.ReadRune``: each byte of an invalid sequence becomes its own U+FFFD."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    return "\ufffd", error.start + 1


codecs.register_error("app.core.modelfile.parser.per-byte", _one_replacement_per_byte)


def _decode_utf16(data: bytes, byteorder: Literal["little", "big"]) -> str:
    """x/text's UTF-16 decoder: bad surrogates become U+FFFD (two trailing halves in a row make one)."""
    if len(data) % 2 == 0:
        try:
            return data.decode("utf-16-le" if byteorder == "little" else "utf-16-be")
        except UnicodeDecodeError:
            pass
    out: list[str] = []
    i, n = 0, len(data)
    while i < n:
        if i + 1 >= n:  # a single trailing byte
            out.append("\ufffd")
            break
        unit = int.from_bytes(data[i : i + 2], byteorder)
        code, size = unit, 2
        if 0xD800 <= unit <= 0xDFFF and i + 3 < n:
            low = int.from_bytes(data[i + 2 : i + 4], byteorder)
            if 0xDC00 <= low <= 0xDFFF:
                size = 4
                code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00) if unit <= 0xDBFF else 0xFFFD
        out.append("\ufffd" if 0xD800 <= code <= 0xDFFF else chr(code))
        i += size
    return "".join(out)


def _decode(data: bytes) -> str:
    """``unicode.BOMOverride(unicode.UTF8.NewDecoder())`` followed by ``ReadRune``."""
    if data[:2] == b"\xff\xfe":
        return _decode_utf16(data[2:], "little")
    if data[:2] == b"\xfe\xff":
        return _decode_utf16(data[2:], "big")
    if data[:3] == b"\xef\xbb\xbf":  # the BOM switches to a pass-through: ReadRune replaces bad bytes one by one
        return data[3:].decode("utf-8", "app.core.modelfile.parser.per-byte")
    return data.decode("utf-8", "replace")  # x/text replaces each maximal ill-formed subpart, as Python does


# --- Go's strconv.IsPrint --------------------------------------------------------------------------------------
# Go's IsPrint is "category L, M, N, P or S, or the ASCII space", from the Unicode tables of the Go release that
# builds Ollama (Go 1.26 ships Unicode 15.0.0). Python's own tables differ by the characters assigned in between,
# listed here (generated by comparing the UCD of each version): printable ones that Unicode 15.0 added, for a
# Python older than 15.0, and printable ones added from 15.1 to 17.0, for a newer one.
_ADDED_IN_15_0 = """
CF3 ECE 10EFD-10EFF 1123F-11241 11B00-11B09 11F00-11F10 11F12-11F3A 11F3E-11F59 1342F 13440-13455 1B132 1B155
1D2C0-1D2D3 1DF25-1DF2A 1E030-1E06D 1E08F 1E4D0-1E4F9 1F6DC 1F774-1F776 1F77B-1F77F 1F7D9 1FA75-1FA77 1FA87-1FA88
1FAAD-1FAAF 1FABB-1FABD 1FABF 1FACE-1FACF 1FADA-1FADB 1FAE8 1FAF7-1FAF8 2B739 31350-323AF
"""
_ADDED_AFTER_15_0 = """
88F 897 C5C CDC 1ACF-1ADD 1AE0-1AEB 1B4E-1B4F 1B7F 1C89-1C8A 20C1 2427-2429 2B96 2FFC-2FFF 31E4-31E5 31EF A7CB-A7CF
A7D2 A7D4 A7DA-A7DC A7F1 FBC3-FBD2 FD90-FD91 FDC8-FDCE 105C0-105F3 10940-10959 10D40-10D65 10D69-10D85 10D8E-10D8F
10EC2-10EC7 10ED0-10ED8 10EFA-10EFC 11380-11389 1138B 1138E 11390-113B5 113B7-113C0 113C2 113C5 113C7-113CA
113CC-113D5 113D7-113D8 113E1-113E2 116D0-116E3 11B60-11B67 11BC0-11BE1 11BF0-11BF9 11DB0-11DDB 11DE0-11DE9 11F5A
13460-143FA 16100-16139 16D40-16D79 16EA0-16EB8 16EBB-16ED3 16FF2-16FF6 187F8-187FF 18CFF 18D09-18D1E 18D80-18DF2
1CC00-1CCFC 1CD00-1CEB3 1CEBA-1CED0 1CEE0-1CEF0 1E5D0-1E5FA 1E5FF 1E6C0-1E6DE 1E6E0-1E6F5 1E6FE-1E6FF 1F6D8
1F777-1F77A 1F8B2-1F8BB 1F8C0-1F8C1 1F8D0-1F8D8 1FA54-1FA57 1FA89-1FA8A 1FA8E-1FA8F 1FABE 1FAC6 1FAC8 1FACD 1FADC
1FADF 1FAE9-1FAEA 1FAEF 1FBCB-1FBEF 1FBFA 2B73A-2B73F 2CEA2-2CEAD 2EBF0-2EE5D 323B0-33479
"""


def _ranges(table: str) -> tuple[list[int], list[int]]:
    starts: list[int] = []
    ends: list[int] = []
    for item in table.split():
        first, _, last = item.partition("-")
        starts.append(int(first, 16))
        ends.append(int(last or first, 16))
    return starts, ends


_PY_UNICODE = tuple(int(part) for part in unicodedata.unidata_version.split("."))
if _PY_UNICODE < (15, 0, 0):
    _CORRECTION, _CORRECTED_TO = _ranges(_ADDED_IN_15_0), True
elif _PY_UNICODE > (15, 0, 0):
    _CORRECTION, _CORRECTED_TO = _ranges(_ADDED_AFTER_15_0), False
else:
    _CORRECTION, _CORRECTED_TO = ([], []), False


def _is_print(ch: str) -> bool:
    if " " <= ch <= "~":
        return True
    if ch < "\xa1":  # C0 and C1 controls, DEL, NBSP
        return False
    code = ord(ch)
    starts, ends = _CORRECTION
    i = bisect.bisect_right(starts, code) - 1
    if i >= 0 and code <= ends[i]:
        return _CORRECTED_TO
    return unicodedata.category(ch)[0] in "LMNPS"


# --- the state machine -----------------------------------------------------------------------------------------
class _State(enum.Enum):
    NIL = enum.auto()
    NAME = enum.auto()
    VALUE = enum.auto()
    PARAMETER = enum.auto()
    MESSAGE = enum.auto()
    COMMENT = enum.auto()


# Module names for the states: an Enum attribute costs ~0.25 µs in Python 3.11, too much once per character.
_NIL, _NAME, _VALUE, _PARAMETER, _MESSAGE, _COMMENT = (
    _State.NIL,
    _State.NAME,
    _State.VALUE,
    _State.PARAMETER,
    _State.MESSAGE,
    _State.COMMENT,
)


def _is_alpha(ch: str) -> bool:
    return "a" <= ch <= "z" or "A" <= ch <= "Z"


def _next_state(state: _State, ch: str, line: int, buffer: list[str]) -> tuple[_State, bool]:
    """Where ``ch`` leads from ``state``, and whether ``ch`` itself may go into the buffer."""
    if state is _NIL:
        if ch == "#":
            return _COMMENT, False
        if ch in _BLANK:
            return _NIL, False
        return _NAME, True
    if state is _NAME:
        if _is_alpha(ch):
            return _NAME, True
        if ch in _SPACE:
            return _VALUE, False
        raise ModelfileError(f"(line {line}): {_INVALID_COMMAND}", line)
    if state is _VALUE:
        return (_NIL if ch in _BLANK else _VALUE), True
    if state is _COMMENT:
        return (_NIL if ch in _NEWLINE else _COMMENT), False
    # PARAMETER names take letters, digits and "_"; MESSAGE roles only letters
    if _is_alpha(ch) or (state is _PARAMETER and ("0" <= ch <= "9" or ch == "_")):
        return state, True
    if ch in _SPACE:
        return _VALUE, False
    raise ModelfileError(f"{_UNEXPECTED_EOF}: {''.join(buffer)}")


# The scanner takes whole runs where the state machine would only go round: a value's text up to a line break
# or a control character, a comment up to its line break, blank lines, a keyword, a PARAMETER name or a MESSAGE
# role; anything else goes through ``_next_state`` one character at a time. Inside an open quote it jumps to
# the next line break a quote could close at. This keeps a 1 MiB Modelfile well under a second.
_VALUE_RUN = re.compile(r"[^\x00-\x08\n-\x1f\x7f]+")
_SKIPPED = re.compile(r"(?:[ \t\r\n]+|#[^\r\n]*)+")  # blanks and comments between instructions
# A whole keyword, PARAMETER name or MESSAGE role and the space or tab that ends it, where one starts; and a run
# of the characters each takes, once one has started.
_WORD = {
    _NIL: re.compile(r"([A-Za-z]+)[ \t]"),
    _MESSAGE: re.compile(r"([A-Za-z]*)[ \t]"),
    _PARAMETER: re.compile(r"([A-Za-z0-9_]*)[ \t]"),
}
_LETTERS = re.compile(r"[A-Za-z]+")
_WORD_RUN = {_NAME: _LETTERS, _MESSAGE: _LETTERS, _PARAMETER: re.compile(r"[A-Za-z0-9_]+")}
# A quote that may end its line: only blanks, controls or non-ASCII (perhaps dropped) follow it to the break.
_CLOSING_QUOTE = re.compile(r'"(?=[^\r\n!-~]*(?:[\r\n]|\Z))')
_DROPPED_ASCII = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # ASCII controls a value drops


def _kept(text: str) -> str:
    """``text`` less the characters a value drops: everything Go's IsPrint rejects, except blanks."""
    if text.isascii():
        return _DROPPED_ASCII.sub("", text) if _DROPPED_ASCII.search(text) else text
    return "".join(ch for ch in text if ch in _BLANK or _is_print_cached(ch))


@functools.lru_cache(maxsize=8192)
def _is_print_cached(ch: str) -> bool:
    return _is_print(ch)


class _Buffer:
    """The current word or value, and where its non-blank part starts and ends: closing a quote is checked in
    constant time however many blank lines the value holds (a trim on every line made that quadratic)."""

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.start: int | None = None  # the first non-blank character
        self.end = 0  # just after the last non-blank character

    def add(self, text: str) -> None:
        """Append characters the value keeps."""
        core = text.strip(_BLANK)
        if core:
            base = len(self.chars)
            self.start = base + text.index(core[0]) if self.start is None else self.start
            self.end = base + len(text.rstrip(_BLANK))
        self.chars.extend(text)

    def clear(self) -> None:
        self.chars.clear()
        self.start, self.end = None, 0

    def text(self) -> str:
        return "".join(self.chars)

    def unquote(self) -> str | None:
        """Ollama's ``unquote(strings.TrimSpace(buffer))``; ``None`` while a quote is still open."""
        if self.start is None:
            return ""
        chars, start, end = self.chars, self.start, self.end
        if chars[start : start + 3] == ['"', '"', '"']:
            if end - start >= 6 and chars[end - 3 : end] == ['"', '"', '"']:
                return "".join(chars[start + 3 : end - 3])
            return None
        if chars[start] == '"':
            if end - start >= 2 and chars[end - 1] == '"':
                return "".join(chars[start + 1 : end - 1])
            return None
        return "".join(chars[start:end])


def _scan(text: str) -> list[Command]:
    """The commands of ``text``, without the FROM check."""
    commands: list[Command] = []
    state = _NIL
    line = 1
    buffer = _Buffer()
    name = role = ""
    i, size = 0, len(text)
    while i < size:
        if state is _VALUE:  # values are most of a file
            i, line, value = _value_step(text, i, line, buffer)
            if value is not None:
                commands.append(Command(name, f"{role}: {value}" if role else value))
                role = ""
                buffer.clear()
                state = _NIL
            continue
        if state is _NIL and (skipped := _SKIPPED.match(text, i)) is not None:
            line += text.count("\r", i, skipped.end()) + text.count("\n", i, skipped.end())
            i = skipped.end()
            continue
        word = _WORD[state].match(text, i) if state in _WORD and not buffer.chars else None
        if word is not None:
            state, name, role = _after_word(_NAME if state is _NIL else state, word.group(1), line, name, role)
            i = word.end()
            continue
        if state in _WORD_RUN and (run := _WORD_RUN[state].match(text, i)) is not None:
            buffer.add(run.group())
            i = run.end()
            continue
        ch = text[i]
        i += 1
        if ch in _NEWLINE:
            line += 1
        following, keep = _next_state(state, ch, line, buffer.chars)
        if following is not state:
            if state is not _NIL and state is not _COMMENT:
                following, name, role = _after_word(state, buffer.text(), line, name, role)
            buffer.clear()
            state = following
        if keep and _is_print(ch):
            buffer.add(ch)
    if state is _VALUE:
        value = buffer.unquote()
        if value is None:
            raise ModelfileError(_UNEXPECTED_EOF)
        commands.append(Command(name, f"{role}: {value}" if role else value))
    elif state not in (_NIL, _COMMENT):
        raise ModelfileError(_UNEXPECTED_EOF)
    return commands


def _after_word(state: _State, word: str, line: int, name: str, role: str) -> tuple[_State, str, str]:
    """The state after a keyword (``state`` NAME), PARAMETER name or MESSAGE role ended by a space or tab, and
    the command's name and role so far."""
    if state is _NAME:
        keyword = word.lower() if word.isascii() else word
        if keyword not in _KEYWORDS:
            raise ModelfileError(f"(line {line}): {_INVALID_COMMAND}", line)
        if keyword == "parameter":
            return _PARAMETER, name, role  # the name comes next
        return (_MESSAGE if keyword == "message" else _VALUE), "model" if keyword == "from" else keyword, role
    if state is _PARAMETER:
        return _VALUE, word, role
    if word not in _ROLES:
        raise ModelfileError(f"(line {line}): {_INVALID_ROLE}", line)
    return _VALUE, name, word


def _value_step(text: str, i: int, line: int, buffer: _Buffer) -> tuple[int, int, str | None]:
    """Read a value on from ``i`` to the line break that ends it, or to the end of the text: ``(next index,
    line, the value)``, the value ``None`` at the end of the text (the caller decides).

    A value keeps spaces and tabs and ends at the first line break where no quote is open; a control character
    is dropped. Inside an open quote nothing can close it before a line break that a quote ends, so the text up
    to that quote is taken at once."""
    size = len(text)
    while i < size:
        run = _VALUE_RUN.match(text, i)
        if run is not None:
            buffer.add(_kept(run.group()))
            i = run.end()
            continue
        if text[i] not in _NEWLINE:  # a control character
            i += 1
            continue
        value = buffer.unquote()
        if value is not None:
            return i + 1, line + 1, value
        closing = _CLOSING_QUOTE.search(text, i)
        stop = closing.start() if closing is not None else size
        buffer.add(_kept(text[i:stop]))
        line += text.count("\r", i, stop) + text.count("\n", i, stop)
        i = stop
    return i, line, None


def read_modelfile(path: Path | str) -> bytes:
    """The bytes of the Modelfile at ``path``: a regular file of at most ``MAX_MODELFILE_BYTES``.

    A FIFO, a device (or a link to one) or a larger file raises ``UserFileError`` at once, without reading it;
    ``OSError``s (missing, not allowed) pass through."""
    return read_user_bytes(path, max_bytes=MAX_MODELFILE_BYTES, what=f"the Modelfile {path}")


def parse_modelfile(data: str | bytes) -> Modelfile:
    """Parse a Modelfile as ``ollama create`` does; raises :class:`ModelfileError` with Ollama's message."""
    if isinstance(data, bytes | bytearray | memoryview):
        text = _decode(bytes(data))
    else:
        text = data[1:] if data.startswith("\ufeff") else data
    commands = _scan(text)
    if not any(c.name == "model" for c in commands):
        raise ModelfileError(_MISSING_FROM)
    return Modelfile(commands)


# --- writing ---------------------------------------------------------------------------------------------------
def quote(value: str) -> str:
    """Ollama's ``quote``: quotes only a value with a newline or a leading or trailing space."""
    if "\n" in value or value.startswith(" ") or value.endswith(" "):
        if '"' in value:
            return f'"""{value}"""'
        return f'"{value}"'
    return value


_PLAIN_VALUE = re.compile(r"[!-~](?:[ -~]*[!-~])?")


def _write_value(prefix: str, value: str, command: Command, ollama: str) -> str:
    """``prefix value`` as Ollama writes it when that reads back as ``command``, else a quoting that does.

    Quoting fails only for a value with a non-printable character (Ollama drops it) or with a line break right
    after ``\"\"\"`` (plus blanks): that line would close a triple quote, and a single quote closes even sooner.
    """
    if ollama == value and _PLAIN_VALUE.fullmatch(value) and value[0] != '"':
        return f"{prefix} {value}"  # printable ASCII, no quote to open, no blank to trim: reads back as it is
    single, triple = f'"{value}"', f'"""{value}"""'
    for candidate in (ollama, *((triple, single) if '"' in value else (single, triple))):
        line = f"{prefix} {candidate}"
        try:
            if _scan(line + "\n") == [command]:
                return line
        except ModelfileError:
            pass
    dropped = next((ch for ch in value if ch not in _BLANK and not _is_print(ch)), None)
    if dropped is not None:
        reason = f"it contains U+{ord(dropped):04X}, a character Ollama's parser drops"
    else:
        reason = 'a line of it ends with """, which would end any quoted value early'
    raise ModelfileError(f"cannot write {prefix} as a Modelfile line: {reason}")


def _write_command(command: Command) -> str:
    name, args = command.name, command.args
    if name == "model":
        return _write_value("FROM", args, command, args)
    if name in _NAMED:
        return _write_value(name.upper(), args, command, quote(args))
    if name == "message":
        role, sep, text = args.partition(": ")
        if sep and role in _ROLES:
            return _write_value(f"MESSAGE {role}", text, command, quote(text))
        # Not a MESSAGE Ollama's parser accepts, but "PARAMETER message ..." reads back as this very command.
    elif not _PARAMETER_NAME.fullmatch(name):
        raise ModelfileError(f"cannot write PARAMETER {name!r}: a parameter name has only letters, digits and _")
    return _write_value(f"PARAMETER {name}", args, command, quote(args))


# --- the model ----------------------------------------------------------------------------------------------------
# Where the editing helpers put an instruction the file does not have yet (the order of ``ollama show``).
_RANK = {
    "model": 0,
    "requires": 1,
    "adapter": 2,
    "draft": 3,
    "template": 4,
    "system": 5,
    "renderer": 6,
    "parser": 7,
    "license": 9,
    "message": 10,
}
_PARAMETER_RANK = 8


def _rank(name: str) -> int:
    return _RANK.get(name, _PARAMETER_RANK)


@dataclass
class Modelfile:
    """The commands of a Modelfile, in file order; everything else is derived from them."""

    commands: list[Command] = field(default_factory=list)

    # --- reading ----------------------------------------------------------------------------------------------
    def instructions(self) -> list[dict[str, str]]:
        """The commands as JSON-ready dicts: ``instruction`` plus ``name``/``role`` where needed, and ``value``."""
        out: list[dict[str, str]] = []
        for c in self.commands:
            if c.name == "model":
                out.append({"instruction": "FROM", "value": c.args})
            elif c.name in _NAMED:
                out.append({"instruction": c.name.upper(), "value": c.args})
            elif c.name == "message":
                role, _, text = c.args.partition(": ")
                out.append({"instruction": "MESSAGE", "role": role, "value": text})
            else:
                out.append({"instruction": "PARAMETER", "name": c.name, "value": c.args})
        return out

    def format(self) -> str:
        """The Modelfile text: each command on its own line, as Ollama's ``Modelfile.String()`` writes it
        wherever that reads back unchanged, quoted so that it does where Ollama's text would not (a value
        that starts with a quote, ends in a tab, holds a CR...). ``parse_modelfile(m.format())`` gives back
        ``m.commands`` (given a FROM); a value that no Modelfile can hold raises :class:`ModelfileError`."""
        return "".join(_write_command(c) + "\n" for c in self.commands)

    def _args(self, name: str) -> list[str]:
        return [c.args for c in self.commands if c.name == name]

    def froms(self) -> list[str]:
        return self._args("model")

    @property
    def system(self) -> str | None:
        return self.single("system")

    @property
    def template(self) -> str | None:
        return self.single("template")

    def adapters(self) -> list[str]:
        return self._args("adapter")

    def licenses(self) -> list[str]:
        return self._args("license")

    def messages(self) -> list[tuple[str, str]]:
        """``(role, text)`` pairs, split at the first ``": "`` as Ollama does."""
        pairs = (args.partition(": ") for args in self._args("message"))
        return [(role, text) for role, _, text in pairs]

    def parameters(self) -> dict[str, list[str]]:
        """Every PARAMETER value per name (names as written), in file order."""
        out: dict[str, list[str]] = {}
        for c in self.commands:
            if c.name not in _NOT_PARAMETERS:
                out.setdefault(c.name, []).append(c.args)
        return out

    def single(self, name: str) -> str | None:
        """The args of the last command called ``name`` (the one Ollama keeps), or ``None``."""
        values = self._args(name)
        return values[-1] if values else None

    # --- editing ----------------------------------------------------------------------------------------------
    def _replace(self, old: set[str] | None, new: list[Command], rank: int) -> None:
        """Swap the commands named in ``old`` (``None``: the parameters) for ``new``, where the first one was."""

        def matches(c: Command) -> bool:
            return c.name not in _NOT_PARAMETERS if old is None else c.name in old

        first = next((i for i, c in enumerate(self.commands) if matches(c)), None)
        kept = [c for c in self.commands if not matches(c)]
        if first is None:
            first = max((i + 1 for i, c in enumerate(kept) if _rank(c.name) <= rank), default=0)
        self.commands = kept[:first] + new + kept[first:]

    def set_single(self, name: str, value: str | None) -> None:
        """Leave exactly one ``name`` command with ``value`` (``None``: none at all)."""
        self._replace({name}, [] if value is None else [Command(name, value)], _rank(name))

    def set_list(self, name: str, values: list[str]) -> None:
        """Make ``values`` the ``name`` commands (e.g. ``model`` for FROM, ``license``, ``adapter``)."""
        self._replace({name}, [Command(name, v) for v in values], _rank(name))

    def set_parameters(self, params: list[tuple[str, str]]) -> None:
        """Replace every PARAMETER by ``params`` (``(name, raw value)``, repeats allowed)."""
        for name, _ in params:
            if name in _NOT_PARAMETERS or not _PARAMETER_NAME.fullmatch(name) or not name:
                raise ModelfileError(f"{name!r} cannot be a PARAMETER name")
        self._replace(None, [Command(n, v) for n, v in params], _PARAMETER_RANK)

    def set_messages(self, messages: list[tuple[str, str]]) -> None:
        """Replace every MESSAGE by ``messages`` (``(role, text)``; role is system, user or assistant)."""
        for role, _ in messages:
            if role not in _ROLES:
                raise ModelfileError(_INVALID_ROLE)
        self._replace({"message"}, [Command("message", f"{r}: {t}") for r, t in messages], _rank("message"))
