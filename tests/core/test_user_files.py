"""Bounded reads of user-given files: FIFOs, devices and folders refused at once, sizes bounded per kind; and the
Modelfile parser fast on the largest Modelfile that is let through."""

from __future__ import annotations

import os
import threading
import time

import pytest

from app.core.errors import InvalidInputError
from app.core.modelfile.parser import MAX_MODELFILE_BYTES, parse_modelfile, read_modelfile
from app.core.user_files import MiB, UserFileError, open_user_file, read_user_bytes, read_user_text

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
needs_dev_zero = pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")


def within(seconds: float, fn):
    """``fn()``'s result or exception, from a thread that must finish in ``seconds`` (a hang fails the test)."""
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return outcome


READERS = {
    "read_user_bytes": lambda path: read_user_bytes(path, max_bytes=MiB),
    "read_user_text": lambda path: read_user_text(path, max_bytes=MiB),
    "open_user_file": lambda path: open_user_file(path).close(),
    "read_modelfile": read_modelfile,
}


@needs_fifo
@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path, reader):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    error = within(5, lambda: reader(fifo)).get("error")
    assert isinstance(error, UserFileError) and isinstance(error, InvalidInputError)
    assert "is not a regular file (a pipe or a device); give the path of a regular file" in str(error)


@needs_dev_zero
@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
def test_a_link_to_a_device_is_refused_before_reading(tmp_path, reader):
    link = tmp_path / "Modelfile"
    link.symlink_to("/dev/zero")
    error = within(5, lambda: reader(link)).get("error")
    assert isinstance(error, UserFileError) and "not a regular file" in str(error)


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
def test_a_folder_is_refused_and_a_missing_file_passes_through(tmp_path, reader):
    with pytest.raises(UserFileError, match="is a folder"):
        reader(tmp_path)
    with pytest.raises(FileNotFoundError):
        reader(tmp_path / "absent")


def test_open_user_file_streams_a_regular_file(tmp_path):
    path = tmp_path / "data"
    path.write_bytes(b"one\ntwo\n")
    with open_user_file(path) as stream:
        assert stream.readline() == b"one\n" and stream.read() == b"two\n"


def test_a_file_up_to_the_limit_is_read_and_one_byte_more_is_refused(tmp_path):
    path = tmp_path / "Modelfile"
    path.write_bytes(b"x" * MAX_MODELFILE_BYTES)
    assert len(read_modelfile(path)) == MAX_MODELFILE_BYTES
    path.write_bytes(b"x" * (MAX_MODELFILE_BYTES + 1))
    with pytest.raises(UserFileError, match=r"the Modelfile .* is larger than 1 MiB \(1\.0 MiB\)"):
        read_modelfile(path)


def test_a_50_mb_single_line_modelfile_is_refused_in_under_a_second(tmp_path):
    path = tmp_path / "Modelfile"
    with path.open("wb") as handle:
        handle.write(b"FROM x\nSYSTEM ")
        handle.write(b"y" * 50_000_000)
    started = time.monotonic()
    with pytest.raises(UserFileError, match=r"larger than 1 MiB \(47\.7 MiB\)"):
        read_modelfile(path)
    assert time.monotonic() - started < 1


def test_undecodable_text_names_the_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"caf\xe9")
    with pytest.raises(UserFileError, match=r"notes.txt is not utf-8 text \(byte 3\)"):
        read_user_text(path, max_bytes=MiB)


# --- the parser on the largest Modelfile allowed -------------------------------------------------------------------
def _fill(head: str, unit: str, tail: str = "") -> str:
    """``head``, then ``unit`` repeated to about ``MAX_MODELFILE_BYTES``, then ``tail``."""
    count = (MAX_MODELFILE_BYTES - len(head) - len(tail)) // len(unit.encode())
    return head + unit * count + tail


LARGE = {
    # A long licence or template, the usual reason a Modelfile is large.
    "quoted-lines": _fill('FROM x\nLICENSE """', "Permission is granted to use this model.\n", '"""\n'),
    "one-long-line": _fill("FROM x\nSYSTEM ", "y"),
    "words": _fill("FROM x\nSYSTEM ", "word "),
    "non-ascii": _fill("FROM x\nSYSTEM ", "你好世界 "),
    # Blank lines inside an open quote: trimming the value on every line made this quadratic (minutes).
    "blank-lines-in-a-quote": _fill('FROM x\nSYSTEM """x', "\n", '"""\n'),
    "leading-blanks-then-a-quote": _fill("FROM x\nSYSTEM ", " ", '"""x\n' + "\n" * 100_000 + 'y"""\n'),
    # Many short instructions: the state machine changes state every few characters.
    "many-parameters": _fill("FROM x\n", "PARAMETER stop a\n"),
    "many-messages": _fill("FROM x\n", "MESSAGE user hi\n"),
    "many-comments": _fill("FROM x\n", "# c\n"),
    "short-quoted-lines": _fill('FROM x\nTEMPLATE """', "x\n", '"""\n'),
}


@pytest.mark.parametrize("text", LARGE.values(), ids=LARGE.keys())
def test_a_1_mib_modelfile_parses_and_formats_well_under_a_second(text):
    data = text.encode()
    assert MAX_MODELFILE_BYTES - 64 <= len(data) <= MAX_MODELFILE_BYTES + 100_000
    started = time.perf_counter()
    modelfile = parse_modelfile(data)
    parsed = time.perf_counter() - started
    started = time.perf_counter()
    formatted = modelfile.format()
    formatting = time.perf_counter() - started
    # Measured 0.03-0.39 s to parse and 0.002-0.13 s to format on a loaded 2-core machine; before, the blank-line
    # cases were quadratic (minutes) and the others took 1-2 s.
    assert parsed < 1 and formatting < 1, (parsed, formatting)
    assert parse_modelfile(formatted).commands == modelfile.commands
