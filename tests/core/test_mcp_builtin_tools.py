"""The built-in MCP server's logic: a calculator without eval, reads confined to one folder, and tool results cut
to 64 KiB with the byte count."""

from __future__ import annotations

import os

import pytest

from app.core.mcp.calculator import MAX_EXPRESSION_CHARS, CalculatorError, evaluate, format_number
from app.core.mcp.folder import MAX_READ_BYTES, FolderAccessError, list_folder, read_chunk, resolve_inside
from app.core.mcp.results import MAX_RESULT_BYTES, truncate_text


@pytest.mark.parametrize(
    ("expression", "value"),
    [("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("7 / 2", 3.5), ("7 // 2", 3), ("-7 % 3", 2), ("2 ** 10", 1024),
     ("-(3 - 5)", 2), ("+4", 4), ("2 ** -1", 0.5), ("1.5e3 * 2", 3000.0), ("2 ** 4095 // 2 ** 4094", 2)],
)  # fmt: skip
def test_arithmetic(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("__import__('os')", "found a function call"),
        ("__import__('os').system('true')", "found a function call"),
        ("os", "found the name 'os'"),
        ("(1).__class__", "found an attribute"),
        ("'a' * 3", "found a str constant"),
        ("True + 1", "found a bool constant"),
        ("[1, 2]", "found a List expression"),
        ("lambda: 1", "found a Lambda expression"),
        ("1 if 1 else 2", "found a IfExp expression"),
        ("2 << 3", "found a BinOp expression"),
        ("1j * 2", "found a complex constant"),
        ("9 ** 9 ** 9", "exponents are limited"),
        ("2 ** 100000", "exponents are limited"),
        ("10 ** 5000", "more than 4,096 bits"),
        ("(10 ** 1000) ** 10", "more than 4,096 bits"),
        ("3 ** 4000 * 3 ** 4000", "numbers are limited to 4,096 bits"),
        ("10.0 ** 400", "too large"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("(-8) ** 0.5", "not a real number"),
        ("1 +", "not an arithmetic expression"),
        ("x = 1", "not an arithmetic expression"),
        ("1" + " + 1" * MAX_EXPRESSION_CHARS, "longer than"),
    ],
)
def test_anything_but_bounded_arithmetic_is_refused(expression, reason):
    with pytest.raises(CalculatorError) as caught:
        evaluate(expression)
    assert reason in str(caught.value)


def test_numbers_are_formatted_plainly():
    assert format_number(evaluate("10 / 2")) == "5" and format_number(evaluate("1 / 3")) == "0.3333333333333333"
    assert format_number(evaluate("2 ** 64")) == "18446744073709551616"


# --- the folder ---------------------------------------------------------------------------------------------------
@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "shared"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.txt").write_text("alpha\n")
    (root / "big.bin").write_bytes(b"z" * (MAX_READ_BYTES * 3))
    outside = tmp_path / "secret.txt"
    outside.write_text("do not read")
    (root / "leak").symlink_to(outside)
    (root / "leak_dir").symlink_to(tmp_path)
    (root / "inner").symlink_to(root / "docs" / "a.txt")
    return root


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../secret.txt", "leads outside the folder"),
        ("docs/../../secret.txt", "leads outside the folder"),
        ("leak", "leads outside the folder"),
        ("leak_dir/secret.txt", "leads outside the folder"),
        ("/etc/passwd", "is not relative to the folder"),
        ("~/x", "is not relative to the folder"),
        ("a\0b", "NUL"),
    ],
)
def test_reads_stay_inside_the_folder(folder, path, reason):
    with pytest.raises(FolderAccessError) as caught:
        read_chunk(folder, path)
    assert reason in str(caught.value)


def test_files_inside_are_read_and_links_inside_followed(folder):
    assert read_chunk(folder, "docs/a.txt").data == b"alpha\n"
    assert read_chunk(folder, "inner").data == b"alpha\n"
    assert read_chunk(folder, "docs/./a.txt").complete
    assert resolve_inside(folder, ".") == folder.resolve()


def test_a_big_file_is_read_in_capped_chunks(folder):
    first = read_chunk(folder, "big.bin", max_bytes=10**9)
    assert len(first.data) == MAX_READ_BYTES and first.size == 3 * MAX_READ_BYTES and not first.complete
    last = read_chunk(folder, "big.bin", offset=2 * MAX_READ_BYTES + 10)
    assert len(last.data) == MAX_READ_BYTES - 10 and last.complete


def test_folders_fifos_and_missing_files_are_refused(folder):
    os.mkfifo(folder / "pipe")
    for path, reason in (("docs", "is a folder"), ("pipe", "not a regular file"), ("nope.txt", "there is no file")):
        with pytest.raises(FolderAccessError, match=reason):
            read_chunk(folder, path)


def test_the_listing_marks_links_leading_out(folder):
    lines = list_folder(folder)
    assert "docs/" in lines and f"big.bin  ({3 * MAX_READ_BYTES:,} bytes)" in lines
    assert "leak  (a link leading outside the folder: not readable)" in lines
    assert "leak_dir  (a link leading outside the folder: not readable)" in lines
    assert "inner  (6 bytes)" in lines
    assert list_folder(folder, "docs") == ["a.txt  (6 bytes)"]
    with pytest.raises(FolderAccessError, match="leads outside"):
        list_folder(folder, "..")
    with pytest.raises(FolderAccessError, match="is a file"):
        list_folder(folder, "docs/a.txt")


def test_the_listing_is_capped(folder):
    for index in range(12):
        (folder / "docs" / f"n{index:02}").write_text("")
    lines = list_folder(folder, "docs", max_entries=5)
    assert len(lines) == 6 and lines[-1] == "… and 8 more entries"


# --- results ------------------------------------------------------------------------------------------------------
def test_a_10_mb_result_is_cut_to_64_kib_with_the_byte_count():
    cut = truncate_text("0123456789" * 1_000_000)
    assert cut.truncated and cut.total_bytes == 10_000_000
    assert len(cut.text.encode()) <= MAX_RESULT_BYTES
    assert cut.text.startswith("0123456789") and cut.text.endswith("of 10,000,000 bytes are shown]")
    whole = truncate_text("short")
    assert whole.text == "short" and not whole.truncated and whole.total_bytes == 5


def test_truncation_never_cuts_a_character_in_half():
    cut = truncate_text("é" * 100_000, limit=1001)
    assert cut.total_bytes == 200_000 and len(cut.text.encode()) <= 1001
    head = cut.text.split("\n[truncated")[0]
    assert set(head) == {"é"} and f"the first {len(head.encode()):,} of 200,000 bytes" in cut.text
