"""Bounded reads of user-given files: FIFOs, devices and folders refused at once, sizes bounded per kind; and the
Modelfile parser fast on the largest Modelfile that is let through."""

from __future__ import annotations

import os
import threading

import pytest

from app.core.errors import InvalidInputError
from app.core.modelfile.parser import MAX_MODELFILE_BYTES, parse_modelfile, read_modelfile
from app.core.user_files import MiB, UserFileError, open_user_file, read_user_bytes, read_user_text
from app.devtools.modelfile_bench import large_modelfiles

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


def test_a_50_mb_single_line_modelfile_is_refused_by_its_size(tmp_path):
    path = tmp_path / "Modelfile"
    with path.open("wb") as handle:
        handle.write(b"FROM x\nSYSTEM ")
        handle.write(b"y" * 50_000_000)
    with pytest.raises(UserFileError, match=r"larger than 1 MiB \(47\.7 MiB\)"):
        read_modelfile(path)


def test_undecodable_text_names_the_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"caf\xe9")
    with pytest.raises(UserFileError, match=r"notes.txt is not utf-8 text \(byte 3\)"):
        read_user_text(path, max_bytes=MiB)


# --- the parser on the largest Modelfile allowed -------------------------------------------------------------------
# Its speed (and that it stays linear in the input) is `llm-workstation bench modelfile`; here, that it round-trips.
LARGE = large_modelfiles()


@pytest.mark.parametrize("text", LARGE.values(), ids=LARGE.keys())
def test_a_1_mib_modelfile_parses_and_formats_back_to_the_same_instructions(text):
    data = text.encode()
    assert MAX_MODELFILE_BYTES - 64 <= len(data) <= MAX_MODELFILE_BYTES + 110_000
    modelfile = parse_modelfile(data)  # once quadratic (minutes) for blank lines in a quote: the timeout catches that
    formatted = modelfile.format()
    assert parse_modelfile(formatted).commands == modelfile.commands
