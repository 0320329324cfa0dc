"""PARAMETER typing and ``ollama create``'s client-side checks, against Ollama's api/types.go and parser.go.

The GO_* tables were produced by Go's own strconv (ParseFloat(s, 32), ParseInt(s, 10, 64), ParseBool) and
golang.org/x/mod/semver.IsValid; float results are Go's FormatFloat(f, 'g', -1, 32) of the float32.
"""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.modelfile.params import (
    DEPRECATED_PARAMETERS,
    OLLAMA_OPTIONS,
    CheckResult,
    check_modelfile,
    format_params,
    valid_requires,
)
from app.core.modelfile.parser import Command, Modelfile, ModelfileError, parse_modelfile

GO_FLOATS = [
    ("0.7", "0.7"),
    ("1", "1"),
    ("-1", "-1"),
    ("+5", "5"),
    ("1e3", "1000"),
    ("1E-2", "0.01"),
    (".5", "0.5"),
    ("5.", "5"),
    ("00.5", "0.5"),
    ("-0", "-0"),
    ("1_000", "1000"),
    ("1_000.5", "1000.5"),
    ("1e1_0", "1e+10"),
    ("0x1p-2", "0.25"),
    ("0X1.8P1", "3"),
    ("0x_1p0", "1"),
    ("0x1_0p0", "16"),
    ("inf", "+Inf"),
    ("+Inf", "+Inf"),
    ("-infinity", "-Inf"),
    ("INFINITY", "+Inf"),
    ("nan", "NaN"),
    ("NaN", "NaN"),
    ("3.4028235e38", "3.4028235e+38"),
    ("3.4028236e38", None),
    ("3.4028235677973366e38", "3.4028235e+38"),
    ("1e39", None),
    ("-1e39", None),
    ("1e-45", "1e-45"),
    ("1e-46", "0"),
    ("7.006492321624085e-46", "0"),
    ("7.006492321624086e-46", "1e-45"),
    ("0x1p-149", "1e-45"),
    ("0x1p-150", "0"),
    ("0x1.8p-150", "1e-45"),
    ("0x1p128", None),
    ("0x1.fffffep127", "3.4028235e+38"),
    ("0x1.ffffffp127", None),
    ("0.1", "0.1"),
    ("0.2", "0.2"),
    ("0.30000001192092896", "0.3"),
    ("16777217", "1.6777216e+07"),
    ("1" + "0" * 800 + "e-800", "0.1"),
    ("1" + "0" * 799 + "e-799", "1"),
    ("999999999999999999999999999999", "1e+30"),
    ("", None),
    (" 1", None),
    ("1 ", None),
    ("1__0", None),
    ("_1", None),
    ("1_", None),
    ("1_.5", None),
    ("1._5", None),
    ("1e_1", None),
    ("0x1", None),
    ("0x", None),
    ("0x1p", None),
    ("1e", None),
    ("1e+", None),
    (".", None),
    ("+", None),
    ("+nan", None),
    ("-nan", None),
    ("infx", None),
    ("infin", None),
    ("0.7 # x", None),
    ("1,5", None),
    ("١", None),
    ("1e1.5", None),
    ("0b101", None),
    ("0o7", None),
    ("0x1.p0", "1"),
    ("0x.p0", None),
]
GO_INTS = [
    ("0", 0),
    ("1", 1),
    ("-1", -1),
    ("+1", 1),
    ("007", 7),
    ("9223372036854775807", 9223372036854775807),
    ("9223372036854775808", None),
    ("-9223372036854775808", -9223372036854775808),
    ("-9223372036854775809", None),
    ("", None),
    (" 1", None),
    ("1 ", None),
    ("1_000", None),
    ("0x10", None),
    ("1.0", None),
    ("1e3", None),
    ("٣", None),
    ("--1", None),
    ("+-1", None),
    ("+", None),
]
GO_BOOLS = [
    ("1", True),
    ("t", True),
    ("T", True),
    ("TRUE", True),
    ("true", True),
    ("True", True),
    ("0", False),
    ("f", False),
    ("F", False),
    ("FALSE", False),
    ("false", False),
    ("False", False),
    ("tRUE", None),
    ("yes", None),
    ("on", None),
    ("", None),
    (" true", None),
    ("2", None),
]
GO_SEMVER = [
    ("0.14.0", True),
    ("v0.14.0", True),
    ("1", True),
    ("1.2", True),
    ("v1", True),
    ("v1.2", True),
    ("1.2.3-rc1", True),
    ("1.2.3-rc.1+build.5", True),
    ("1.2-rc1", False),
    ("1-rc1", False),
    ("01.2.3", False),
    ("1.02.3", False),
    ("1.2.03", False),
    ("1.2.3-01", False),
    ("1.2.3-0a", True),
    ("1.2.3-", False),
    ("1.2.3+", False),
    ("1.2.3+001", True),
    ("1.2.3.4", False),
    ("V1.2.3", False),
    ("vv1", False),
    ("", False),
    ("v", False),
    ("1.2.3 ", False),
    (" 1.2.3", False),
    ("1..2", False),
    ("0.0.0", True),
    ("1.2.3-a..b", False),
    ("1.2.3-a-b", True),
    ("1.2.3+a+b", False),
]


def typed(name: str, value: str) -> object:
    return format_params({name: [value]})[0][name]


def refused(name: str, value: str) -> str:
    with pytest.raises(ModelfileError) as info:
        format_params({name: [value]})
    return str(info.value)


# --- the option table ----------------------------------------------------------------------------------------------
def test_options_are_exactly_the_json_tags_of_options_and_runner():
    assert {name: o.kind for name, o in OLLAMA_OPTIONS.items()} == {
        "num_ctx": "int",
        "num_batch": "int",
        "num_gpu": "int",
        "main_gpu": "int",
        "use_mmap": "bool",
        "num_thread": "int",
        "draft_num_predict": "int",
        "num_keep": "int",
        "seed": "int",
        "num_predict": "int",
        "top_k": "int",
        "top_p": "float",
        "min_p": "float",
        "typical_p": "float",
        "repeat_last_n": "int",
        "temperature": "float",
        "repeat_penalty": "float",
        "presence_penalty": "float",
        "frequency_penalty": "float",
        "stop": "list",
    }


def test_defaults_are_default_options():
    assert {name: o.default for name, o in OLLAMA_OPTIONS.items()} == {
        "num_ctx": None,  # OLLAMA_CONTEXT_LENGTH, else chosen from VRAM
        "num_batch": 512,
        "num_gpu": None,  # -1: decided at load
        "main_gpu": None,
        "use_mmap": None,
        "num_thread": None,  # 0: the runtime decides
        "draft_num_predict": 4,
        "num_keep": 4,
        "seed": -1,
        "num_predict": -1,
        "top_k": 40,
        "top_p": 0.9,
        "min_p": 0.0,
        "typical_p": 1.0,
        "repeat_last_n": 64,
        "temperature": 0.8,
        "repeat_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "stop": None,
    }


def test_load_time_options_are_the_runner_fields():
    runner = {"num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap", "num_thread", "draft_num_predict"}
    assert {name for name, o in OLLAMA_OPTIONS.items() if o.load_time} == runner


def test_every_option_has_help():
    for name, option in OLLAMA_OPTIONS.items():
        assert option.name == name
        assert len(option.help) > 30 and option.help.endswith("."), name


def test_deprecated_parameters():
    assert DEPRECATED_PARAMETERS == (
        "penalize_newline",
        "low_vram",
        "f16_kv",
        "logits_all",
        "vocab_only",
        "use_mlock",
        "mirostat",
        "mirostat_tau",
        "mirostat_eta",
    )
    assert not set(DEPRECATED_PARAMETERS) & set(OLLAMA_OPTIONS)


# --- Go's strconv, case by case ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "go"), GO_FLOATS)
def test_float_values_as_go_parses_them(text, go):
    if go is None:
        assert refused("temperature", text) == f"invalid float value [{text}]"
        return
    value = typed("temperature", text)
    assert isinstance(value, float)
    if go == "NaN":
        assert math.isnan(value)
    else:
        assert value == float(go)
        assert math.copysign(1, value) == math.copysign(1, float(go))


@pytest.mark.parametrize(("text", "go"), GO_INTS)
def test_int_values_as_go_parses_them(text, go):
    if go is None:
        assert refused("num_ctx", text) == f"invalid int value [{text}]"
    else:
        value = typed("num_ctx", text)
        assert value == go and type(value) is int


@pytest.mark.parametrize(("text", "go"), GO_BOOLS)
def test_bool_values_as_go_parses_them(text, go):
    if go is None:
        assert refused("use_mmap", text) == f"invalid bool value [{text}]"
    else:
        assert typed("use_mmap", text) is go


@pytest.mark.parametrize(("text", "go"), GO_SEMVER)
def test_requires_as_semver_is_valid(text, go):
    assert valid_requires(text) is go


def float32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


@settings(max_examples=300, deadline=None, database=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_every_float32_reads_back_as_itself(value):
    for text in (repr(value), f"{value:.20e}", value.hex()):
        parsed = typed("top_p", text)
        assert isinstance(parsed, float)
        assert float32(parsed) == value
        assert float(f"{parsed:.9g}") == parsed  # at most 9 digits: the shortest decimal, as Go's JSON sends


@settings(max_examples=300, deadline=None, database=None)
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.sampled_from(["", "+"]))
def test_int64_range(value, sign):
    assert typed("seed", (sign if value >= 0 else "") + str(value)) == value


def test_typed_values_of_create_request():  # TestCreateRequest's parameters
    assert format_params({"temperature": ["0.5"], "top_k": ["1"]}) == ({"temperature": 0.5, "top_k": 1}, [])


def test_every_kind():
    values, warnings = format_params(
        {"main_gpu": ["1"], "use_mmap": ["false"], "min_p": ["0.05"], "stop": ["</s>"], "num_gpu": ["-1"]}
    )
    assert values == {"main_gpu": 1, "use_mmap": False, "min_p": 0.05, "stop": ["</s>"], "num_gpu": -1}
    assert warnings == []


def test_stop_collects_every_value_and_scalars_keep_the_last():
    values, _ = format_params({"stop": ["a", "b", "a"], "temperature": ["0.1", "0.9"], "top_k": ["1", "2"]})
    assert values == {"stop": ["a", "b", "a"], "temperature": 0.9, "top_k": 2}


def test_every_value_is_checked_not_only_the_kept_one():
    assert refused("temperature", "warm") == "invalid float value [warm]"
    with pytest.raises(ModelfileError, match=r"invalid float value \[warm\]"):
        format_params({"temperature": ["warm", "0.5"]})


def test_unknown_parameters():
    assert refused("numa", "true") == "unknown parameter 'numa'"
    assert refused("Temperature", "1") == "unknown parameter 'Temperature'"  # names are case-sensitive
    assert refused("num_gqa", "1") == "unknown parameter 'num_gqa'"
    assert refused("", "1") == "unknown parameter ''"


def test_inline_comment_is_part_of_the_value():
    assert refused("temperature", "0.7 # warm") == "invalid float value [0.7 # warm]"


def test_deprecated_parameters_warn_and_are_dropped():
    values, warnings = format_params({"use_mlock": ["true"], "mirostat": ["2", "1"], "top_k": ["5"]})
    assert values == {"top_k": 5}
    assert warnings == [
        "warning: parameter use_mlock is deprecated",
        "warning: parameter mirostat is deprecated",
        "warning: parameter mirostat is deprecated",
    ]
    assert format_params({"penalize_newline": ["not even a bool"]}) == ({}, [warning("penalize_newline")])


def warning(name: str) -> str:
    return f"warning: parameter {name} is deprecated"


def test_stop_values_are_kept_verbatim():
    assert typed("stop", " <|eot_id|>\n") == [" <|eot_id|>\n"]


# --- check_modelfile -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "parameters"),
    [
        ("FROM test", {}),
        ("FROM test\nTEMPLATE some template\n", {}),
        ("FROM test\nLICENSE single license\nPARAMETER temperature 0.5\nMESSAGE user Hello\n", {"temperature": 0.5}),
        (
            "FROM test\nPARAMETER temperature 0.5\nPARAMETER top_k 1\nSYSTEM You are a bot.\nLICENSE license1\n"
            "LICENSE license2\nMESSAGE user Hello there!\nMESSAGE assistant Hi! How are you?\n",
            {"temperature": 0.5, "top_k": 1},
        ),
    ],
)
def test_create_request_cases(text, parameters):  # TestCreateRequest
    assert check_modelfile(parse_modelfile(text)) == CheckResult(parameters=parameters)


@pytest.mark.parametrize("path", ["./model.gguf", "."])
def test_draft_must_not_be_the_from_path(path):  # TestCreateRequestDraftRejectsSame{File,Directory}
    result = check_modelfile(parse_modelfile(f"\nFROM {path}\nDRAFT {path}\n"))
    assert result.problems == [f"DRAFT must not reference the same local path as FROM: {path}"]


def test_draft_path_comparison_is_normalised_and_order_free():
    result = check_modelfile(parse_modelfile("DRAFT models/../model.gguf\nFROM ./model.gguf\n"))
    assert result.problems == ["DRAFT must not reference the same local path as FROM: ./model.gguf"]
    assert check_modelfile(parse_modelfile("FROM base\nDRAFT ./assistant\n")).problems == []  # TestParseFileDraft


@pytest.mark.parametrize("version", ["0.14.0", "v0.14.0", "1", "0.14", "0.14.0-rc1"])
def test_valid_requires(version):
    assert check_modelfile(parse_modelfile(f"FROM x\nREQUIRES {version}\n")).problems == []


@pytest.mark.parametrize("version", ["latest", "0.14.0.1", "V0.14.0", "", ">=0.14"])
def test_invalid_requires(version):
    result = check_modelfile(parse_modelfile(f"FROM x\nREQUIRES {version}\n"))
    assert result.problems == ["requires must be a valid semver (e.g. 0.14.0)"]


def test_every_problem_is_collected():
    text = (
        "FROM x\nREQUIRES soon\nPARAMETER temperature hot\nPARAMETER numa true\nPARAMETER top_k 1.5\n"
        "PARAMETER use_mmap yes\nPARAMETER use_mlock true\nPARAMETER stop a\nPARAMETER stop b\nPARAMETER seed 7\n"
        "DRAFT x\n"
    )
    result = check_modelfile(parse_modelfile(text))
    assert result.problems == [
        "requires must be a valid semver (e.g. 0.14.0)",
        "invalid float value [hot]",
        "unknown parameter 'numa'",
        "invalid int value [1.5]",
        "invalid bool value [yes]",
        "DRAFT must not reference the same local path as FROM: x",
    ]
    assert result.warnings == ["warning: parameter use_mlock is deprecated"]
    assert result.parameters == {"stop": ["a", "b"], "seed": 7}


def test_same_problem_is_reported_once():
    result = check_modelfile(parse_modelfile("FROM x\nPARAMETER numa 1\nPARAMETER numa 2\n"))
    assert result.problems == ["unknown parameter 'numa'"]


def test_values_json_cannot_carry():
    result = check_modelfile(parse_modelfile("FROM x\nPARAMETER temperature inf\nPARAMETER top_p NaN\n"))
    assert result.problems == ["json: unsupported value: +Inf", "json: unsupported value: NaN"]
    later = check_modelfile(parse_modelfile("FROM x\nPARAMETER temperature -inf\nPARAMETER temperature 1\n"))
    assert later.problems == []  # only the value that is sent counts


def test_missing_from_is_a_problem_for_an_edited_modelfile():
    assert check_modelfile(Modelfile([Command("system", "s")])).problems == ["no FROM line"]


def test_messages_and_texts_are_not_parameters():
    text = "FROM x\nPARAMETER message foo\nSYSTEM s\nTEMPLATE t\nADAPTER a\nLICENSE l\nRENDERER r\nPARSER p\n"
    assert check_modelfile(parse_modelfile(text)) == CheckResult()
