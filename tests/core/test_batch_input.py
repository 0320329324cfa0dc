"""Batch input: JSONL and CSV into requests, per-line problems, ordering, priorities, percentiles, resume ids."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.batch_input import (
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
    with pytest.raises(BatchInputError, match=r"notes.txt line 1 is not a batch result; choose another --output"):
        read_finished_ids(out)
    assert out.read_text() == "my shopping list\n"
