"""Batch input: JSONL and CSV into requests, per-line problems, ordering, priorities, percentiles, resume ids."""

from __future__ import annotations

import csv
import json
import math
import os
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.batch.input import (
    CSV_FIELD_LIMIT,
    MAX_INPUT_BYTES,
    MAX_LINE_BYTES,
    BatchInputError,
    BatchRequest,
    length_priorities,
    load_batch_input,
    parse_csv,
    parse_jsonl,
    percentile,
    percentiles,
    read_finished_ids,
    shortest_first,
)


def jsonl(*items: object) -> str:
    return "\n".join(item if isinstance(item, str) else json.dumps(item) for item in items) + "\n"


# --- JSONL ------------------------------------------------------------------------------------------------------
def test_chat_and_prompt_lines_keep_every_other_field():
    text = jsonl(
        {"id": "a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0.2},
        {"prompt": "Once upon", "stop": ["\n"], "seed": 7, "ignore_eos": True, "top_p": 0.9, "my_engine_knob": [1]},
        {"id": 17, "prompt": "x", "stream": False, "stream_options": {"include_usage": False}},
    )
    result = parse_jsonl(text)
    assert result.problems == []
    chat, prompt, numbered = result.requests
    assert chat.is_chat and chat.id == "a" and chat.line == 1
    assert chat.params == {"max_tokens": 8, "temperature": 0.2}
    assert not prompt.is_chat and prompt.id == "line-2" and prompt.prompt == "Once upon"
    assert prompt.params == {"stop": ["\n"], "seed": 7, "ignore_eos": True, "top_p": 0.9, "my_engine_knob": [1]}
    assert numbered.id == "17" and numbered.params == {}  # the runner owns stream and stream_options


def test_blank_lines_are_skipped_but_counted():
    result = parse_jsonl('\n  \n{"prompt": "a"}\r\n\n{"prompt": "b"}')
    assert [(r.id, r.line) for r in result.requests] == [("line-3", 3), ("line-5", 5)]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "bad JSON: Expecting property name"),
        ("[1, 2]", "not a JSON object"),
        ('{"id": "x"}', 'no "messages" or "prompt" field'),
        ('{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}', "has both messages and prompt"),
        ('{"prompt": ""}', "prompt must be a non-empty string"),
        ('{"prompt": 5}', "prompt must be a non-empty string"),
        ('{"messages": []}', "messages must be a non-empty list"),
        ('{"messages": [{"content": "x"}]}', "messages[0] must be an object with a string role"),
        ('{"messages": [{"role": "user", "content": 3}]}', "messages[0].content must be a string or a list"),
        ('{"prompt": "a", "max_tokens": "10"}', 'max_tokens must be an integer, not "10"'),
        ('{"prompt": "a", "max_tokens": true}', "max_tokens must be an integer"),
        ('{"prompt": "a", "temperature": "hot"}', "temperature must be an integer or a number"),
        ('{"prompt": "a", "stop": [1]}', "stop must be a string or a list"),
        ('{"prompt": "a", "ignore_eos": "yes"}', "ignore_eos must be true or false"),
        ('{"prompt": "a", "seed": 1.5}', "seed must be an integer"),
        ('{"prompt": "a", "n": 2}', "n must be 1"),
        ('{"id": ["x"], "prompt": "a"}', "id must be a non-empty string or an integer"),
        ('{"id": "", "prompt": "a"}', "id must be a non-empty string or an integer"),
    ],
)
def test_bad_lines_are_reported_with_their_number_and_the_rest_still_run(line, reason):
    result = parse_jsonl(jsonl({"id": "first", "prompt": "ok"}, line, {"id": "last", "prompt": "ok"}))
    assert [r.id for r in result.requests] == ["first", "last"]
    (problem,) = result.problems
    assert problem.line == 2 and problem.reason.startswith(reason), problem.reason
    assert str(problem).startswith("line 2: ")


def test_duplicate_ids_keep_the_first_and_name_its_line():
    result = parse_jsonl(jsonl({"id": "a", "prompt": "1"}, {"id": "b", "prompt": "2"}, {"id": "a", "prompt": "3"}))
    assert [r.prompt for r in result.requests] == ["1", "2"]
    assert [str(p) for p in result.problems] == ["line 3: duplicate id 'a' (first on line 1)"]


def test_an_explicit_id_can_collide_with_an_automatic_one():
    result = parse_jsonl(jsonl({"prompt": "auto"}, {"id": "line-1", "prompt": "explicit"}))
    assert [r.id for r in result.requests] == ["line-1"]
    assert "duplicate id 'line-1'" in result.problems[0].reason


def test_openai_batch_api_lines_are_read():
    line = {
        "custom_id": "req-1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
    }
    (request,) = parse_jsonl(jsonl(line)).requests
    assert request.id == "req-1" and request.is_chat and request.params == {"model": "m", "max_tokens": 5}


def test_content_parts_count_their_text_for_the_prompt_length():
    parts = [{"type": "text", "text": "abc"}, {"type": "image_url", "image_url": {"url": "x"}}]
    (request,) = parse_jsonl(
        jsonl({"messages": [{"role": "system", "content": "12"}, {"role": "user", "content": parts}]})
    ).requests
    assert request.prompt_chars == 5


# --- CSV --------------------------------------------------------------------------------------------------------
def test_csv_prompt_column_with_ids_quoted_multiline_fields_and_typed_columns():
    text = (
        "id,prompt,max_tokens,temperature,ignore_eos,colour\r\n"
        'a,"Hello, world",16,0.5,true,red\r\n'
        ',"line one\nline two\nline three",,,,\r\n'
        "c,short,8,,no,\r\n"
    )
    result = parse_csv(text)
    assert result.problems == []
    a, multi, c = result.requests
    assert (a.id, a.line, a.prompt) == ("a", 2, "Hello, world")
    assert a.params == {"max_tokens": 16, "temperature": 0.5, "ignore_eos": True}
    assert (multi.id, multi.line, multi.prompt) == ("line-3", 3, "line one\nline two\nline three")
    assert multi.params == {}
    assert (c.id, c.line, c.params) == ("c", 6, {"max_tokens": 8, "ignore_eos": False})
    assert result.notes == ["CSV columns ignored (not a known request field): colour"]


def test_csv_bad_rows_are_reported_with_their_line_numbers():
    text = 'prompt,max_tokens\nfine,4\n"",4\nx,lots\na,1,extra\n\nlast,2\n'
    result = parse_csv(text)
    assert [r.prompt for r in result.requests] == ["fine", "last"]
    assert [str(p) for p in result.problems] == [
        "line 3: prompt must be a non-empty string",
        'line 4: max_tokens must be an integer, not "lots"',
        "line 5: has 3 fields; the header has 2",
    ]


def test_csv_as_chat_turns_prompts_into_user_messages():
    (request,) = parse_csv("Prompt\nhi there\n", as_chat=True).requests
    assert request.messages == [{"role": "user", "content": "hi there"}] and request.prompt is None


def test_csv_without_a_prompt_column_is_unreadable():
    with pytest.raises(BatchInputError, match='no "prompt" column'):
        parse_csv("question,answer\na,b\n")
    with pytest.raises(BatchInputError, match='no "prompt" column'):
        parse_csv("")


def test_load_picks_the_format_by_extension_and_handles_a_bom(tmp_path):
    csv_file = tmp_path / "in.CSV"
    csv_file.write_bytes("\ufeffprompt\nhello\n".encode())
    assert load_batch_input(csv_file).requests[0].prompt == "hello"
    jsonl_file = tmp_path / "in.txt"
    jsonl_file.write_bytes('\ufeff{"prompt": "hey"}\n'.encode())
    assert load_batch_input(jsonl_file).requests[0].prompt == "hey"


def test_load_says_why_a_file_cannot_be_read(tmp_path):
    with pytest.raises(BatchInputError, match=r"cannot read .*missing.jsonl: No such file"):
        load_batch_input(tmp_path / "missing.jsonl")
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"prompt": "caf\xe9"}'.encode("latin-1"))
    with pytest.raises(BatchInputError, match=r"not UTF-8 text .*save it as UTF-8"):
        load_batch_input(latin)


# --- hostile and large input -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "line",
    [
        pytest.param("[" * 100_000 + "]" * 100_000, id="nested-list"),
        pytest.param('{"prompt": ' * 50_000 + '"x"' + "}" * 50_000, id="nested-object"),
        pytest.param('{"id": "n", "messages": [' + "[" * 30_000 + "]" * 30_000 + "]}", id="nested-in-messages"),
    ],
)
def test_a_deeply_nested_line_is_a_bad_line_and_the_good_lines_run(line):
    result = parse_jsonl(jsonl({"id": "first", "prompt": "ok"}, line, {"id": "last", "prompt": "ok"}))
    assert [r.id for r in result.requests] == ["first", "last"]
    assert [str(p) for p in result.problems] == ["line 2: bad JSON: nested too deeply to be valid JSON"]


def test_a_jsonl_line_over_the_bound_is_a_bad_line_and_the_good_lines_run(tmp_path):
    source = tmp_path / "in.jsonl"
    huge = json.dumps({"id": "huge", "prompt": "x" * MAX_LINE_BYTES})
    source.write_text(jsonl({"id": "a", "prompt": "ok"}, huge, {"id": "b", "prompt": "ok"}))
    result = load_batch_input(source)
    assert [(r.id, r.line) for r in result.requests] == [("a", 1), ("b", 3)]
    assert [str(p) for p in result.problems] == ["line 2: the line is longer than 16 MiB; shorten it"]


def test_a_jsonl_line_at_the_bound_is_read():
    line = json.dumps({"id": "big", "prompt": ""})
    line = line.replace('""', '"' + "y" * (MAX_LINE_BYTES - len(line)) + '"')
    (request,) = parse_jsonl(line + "\r\n").requests
    assert request.id == "big" and len(line) == MAX_LINE_BYTES


def test_any_line_break_ends_a_jsonl_line_and_numbers_stay_right():
    result = parse_jsonl('{"prompt": "a"}\r{"prompt": "b"}\r\n{"prompt": "c"}\n{bad\r{"prompt": "d\u2028e"}')
    assert [(r.id, r.prompt) for r in result.requests] == [
        ("line-1", "a"),
        ("line-2", "b"),
        ("line-3", "c"),
        ("line-5", "d\u2028e"),  # U+2028 may sit inside a JSON string: it is no line break
    ]
    assert [p.line for p in result.problems] == [4]


@given(
    st.lists(st.sampled_from(["a", "é", '"', "\r", "\n", "\r\n", "xyz"]), max_size=40),
    st.integers(1, 5),
    st.integers(1, 6),
)
def test_lines_split_like_universal_newlines_whatever_the_chunks(parts, chunk, max_line):
    """The line reader against ``str.splitlines`` on CR, LF and CR LF, with chunks of a few bytes."""
    import io as _io

    from app.core import bounded_lines

    text = "".join(parts)
    expected = _io.StringIO(text, newline="").readlines()
    original = bounded_lines._CHUNK
    bounded_lines._CHUNK = chunk
    try:
        lines = bounded_lines.BoundedLines(_io.BytesIO(text.encode()), "test", max_line, None)
        got: list[str | int] = []
        while True:
            try:
                line = lines.raw()
            except bounded_lines.LineTooLong as exc:
                got.append(exc.number)
                continue
            if line is None:
                break
            got.append(line.decode())
    finally:
        bounded_lines._CHUNK = original
    want = [
        number if len(line.rstrip("\r\n").encode()) > max_line else line
        for number, line in enumerate(expected, start=1)
    ]
    assert got == want
    assert lines.number == len(expected) and lines.quotes == text.count('"')


def test_a_csv_field_over_128_kib_is_read():
    """Python's csv module stops at 131,072 characters unless told otherwise; a long prompt is normal."""
    text = f'id,prompt\na,"{"p" * 200_000}"\nb,short\n'
    result = parse_csv(text)
    assert result.problems == [] and [len(r.prompt or "") for r in result.requests] == [200_000, 5]


def test_a_csv_field_over_the_limit_is_a_row_error_and_the_other_rows_run():
    over = "x" * (CSV_FIELD_LIMIT + 1)
    text = f'id,prompt\n1,a\n2,{over}\n3,b\n4,"first line\n{over}\nlast line"\n5,c\n6,{"y" * CSV_FIELD_LIMIT}\n'
    result = parse_csv(text)
    assert [(r.id, r.line) for r in result.requests] == [("1", 2), ("3", 4), ("5", 8), ("6", 9)]
    assert len(result.requests[-1].prompt or "") == CSV_FIELD_LIMIT  # exactly at the limit is fine
    assert [str(p) for p in result.problems] == [
        "line 3: a field is longer than 16,777,216 characters (16 Mi), so this line did not run; shorten it",
        "line 5: a field is longer than 16,777,216 characters (16 Mi), so lines 5-7 did not run; shorten it",
    ]


def test_an_unterminated_quote_is_reported_with_its_line_and_no_rows_run_together():
    result = parse_csv('id,prompt\n1,fine\n2,"opened\n3,swallowed\n4,also swallowed\n')
    assert [r.id for r in result.requests] == ["1"]
    (problem,) = result.problems
    assert problem.line == 3
    assert problem.reason.startswith("unterminated quote: the quoted field that opens here is never closed")
    assert "lines 3-5 ran together and did not run; close the quote" in problem.reason


def test_a_quote_closed_badly_is_a_row_error_and_the_rows_after_it_run():
    text = 'id,prompt\n1,"He said "hi" to me"\n2,"a"b,"c\nd"\n3,fine\n4,"x""y"\n5,5" screen\n'
    result = parse_csv(text)
    assert [(r.id, r.line, r.prompt) for r in result.requests] == [
        ("3", 5, "fine"),
        ("4", 6, 'x"y'),
        ("5", 7, '5" screen'),  # a quote inside an unquoted field is just a character
    ]
    assert [(p.line, p.reason) for p in result.problems] == [
        (
            2,
            "bad CSV quoting (',' expected after '\"'), so this line did not run; write a \" inside a quoted "
            'field twice ("")',
        ),
        (
            3,
            "bad CSV quoting (',' expected after '\"'), so lines 3-4 did not run; write a \" inside a quoted "
            'field twice ("")',
        ),
    ]


def test_csv_with_cr_line_breaks_as_spreadsheets_on_macs_save_them():
    result = parse_csv('id,prompt\r1,a\r2,"b\rc"\r3,d\r')
    assert [(r.id, r.line, r.prompt) for r in result.requests] == [("1", 2, "a"), ("2", 3, "b\rc"), ("3", 5, "d")]


def test_the_csv_field_limit_is_put_back_after_a_read():
    before = csv.field_size_limit()
    parse_csv('prompt\n"unterminated\n')
    assert csv.field_size_limit() == before


def _finishes_within(seconds: float, fn):
    """Run ``fn`` in a thread; fail (instead of hanging the suite) when it has not returned in time."""
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return outcome, time.monotonic() - started


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
@pytest.mark.parametrize("name", ["in.jsonl", "in.csv"])
def test_a_fifo_is_refused_at_once(tmp_path, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    outcome, _ = _finishes_within(60, lambda: load_batch_input(fifo))
    assert isinstance(outcome.get("error"), BatchInputError)
    assert "is not a regular file (a pipe or a device); give the path of a regular file" in str(outcome["error"])


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_link_to_a_device_or_a_folder_is_refused(tmp_path):
    link = tmp_path / "zero.jsonl"
    link.symlink_to("/dev/zero")
    outcome, _ = _finishes_within(60, lambda: load_batch_input(link))
    assert "not a regular file" in str(outcome.get("error"))
    with pytest.raises(BatchInputError, match="is a folder"):
        load_batch_input(tmp_path)


def test_a_file_over_the_size_limit_is_refused_before_reading(tmp_path):
    sparse = tmp_path / "huge.jsonl"
    with sparse.open("wb") as handle:
        handle.truncate(MAX_INPUT_BYTES + 1)  # sparse: no disk used
    outcome, _ = _finishes_within(60, lambda: load_batch_input(sparse))
    assert "is larger than 1024 MiB" in str(outcome.get("error")) and "split it into several files" in str(
        outcome.get("error")
    )


def test_an_earlier_output_with_nested_json_is_refused_not_a_crash(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text(jsonl({"id": "a", "error": None}, "[" * 100_000 + "]" * 100_000))
    with pytest.raises(BatchInputError, match="line 2 is not a batch result"):
        read_finished_ids(out)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
def test_an_earlier_output_that_is_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    outcome, _ = _finishes_within(60, lambda: read_finished_ids(fifo))
    assert "not a regular file" in str(outcome.get("error"))


# --- ordering and priorities ------------------------------------------------------------------------------------
def _req(rid: str, prompt: str) -> BatchRequest:
    return BatchRequest(id=rid, line=1, prompt=prompt)


def test_shortest_first_is_stable():
    requests = [_req("a", "xxxx"), _req("b", "x"), _req("c", "xx"), _req("d", "x")]
    assert [r.id for r in shortest_first(requests)] == ["b", "d", "c", "a"]


def test_priorities_are_the_dense_rank_of_prompt_length():
    requests = [_req("a", "xxxx"), _req("b", "x"), _req("c", "xx"), _req("d", "x")]
    assert length_priorities(requests) == {"a": 2, "b": 0, "c": 1, "d": 0}


# --- percentiles ------------------------------------------------------------------------------------------------
def test_nearest_rank_percentiles():
    values = list(range(1, 11))
    assert percentiles(values) == {"p50": 5, "p90": 9, "p99": 10}
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None
    assert percentile([5, 1, 3], 0) == 1  # rank never goes below 1


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=60), st.integers(1, 100))
def test_percentile_is_the_smallest_value_covering_pct_percent(values, pct):
    result = percentile(values, pct)
    assert result in values
    assert sum(v <= result for v in values) >= math.ceil(pct / 100 * len(values)) - 1e-9
    assert sum(v < result for v in values) < pct / 100 * len(values)


# --- resuming ---------------------------------------------------------------------------------------------------
def test_finished_ids_are_those_without_an_error(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text(jsonl({"id": "a", "error": None}, {"id": "b", "error": "HTTP 500"}, {"id": "c", "error": None}))
    assert read_finished_ids(out) == ({"a", "c"}, [])
    assert read_finished_ids(tmp_path / "absent.jsonl") == (set(), [])


def test_an_incomplete_last_line_is_cut_off(tmp_path):
    out = tmp_path / "out.jsonl"
    whole = jsonl({"id": "a", "error": None})
    out.write_text(whole + '{"id": "b", "outp')
    finished, notes = read_finished_ids(out)
    assert finished == {"a"} and "incomplete last line" in notes[0]
    assert out.read_text() == whole


def test_a_file_that_is_not_batch_output_is_refused(tmp_path):
    out = tmp_path / "notes.txt"
    out.write_text("my shopping list\n")
    with pytest.raises(BatchInputError, match=r"notes.txt line 1 is not a batch result; choose another output file"):
        read_finished_ids(out)
    assert out.read_text() == "my shopping list\n"
