"""Writing Modelfiles: Ollama's quote()/Command.String() where they are lossless, a faithful quoting where they
are not, the accessors and editing helpers, and property tests for the round trip."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from app.core.modelfile.parser import Command, Modelfile, ModelfileError, parse_modelfile, quote

NAMED = ("license", "template", "system", "adapter", "renderer", "parser", "requires", "draft")


def ollama_line(command: Command) -> str:
    """Ollama's Command.String(), written out from parser.go (the test oracle for the lossless cases)."""
    if command.name == "model":
        return f"FROM {command.args}"
    if command.name in NAMED:
        return f"{command.name.upper()} {quote(command.args)}"
    if command.name == "message":
        role, _, text = command.args.partition(": ")
        return f"MESSAGE {role} {quote(text)}"
    return f"PARAMETER {command.name} {quote(command.args)}"


def ollama_reads_back(command: Command) -> bool:
    try:
        return parse_modelfile(ollama_line(command) + "\nFROM m\n").commands[0] == command
    except ModelfileError:
        return False


def reparse(modelfile: Modelfile) -> list[Command]:
    return parse_modelfile(modelfile.format()).commands


def line_of(command: Command) -> str:
    return Modelfile([command]).format().removesuffix("\n")


# --- quote -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", "plain"),
        ("", ""),
        (" lead", '" lead"'),
        ("trail ", '"trail "'),
        ("two\nlines", '"two\nlines"'),
        ('say "hi"\nnow', '"""say "hi"\nnow"""'),
        (' "x"', '""" "x""""'),
        ('"quoted"', '"quoted"'),  # returned raw: Ollama quotes only for newlines and outer spaces
        ("tab\t", "tab\t"),
        ("cr\rx", "cr\rx"),
        ('a"""b', 'a"""b'),
    ],
)
def test_quote_is_ollamas(value, expected):
    assert quote(value) == expected


# --- TestParseFileFormatParseFile and Ollama's own output --------------------------------------------------------
FORMAT_CASES = [
    (
        "\nFROM foo\nADAPTER adapter1\nLICENSE MIT\nPARAMETER param1 value1\nPARAMETER param2 value2\n"
        "TEMPLATE template1\nMESSAGE system You are a file parser. Always parse things.\nMESSAGE user Hey there!\n"
        "MESSAGE assistant Hello, I want to parse all the things!\n",
        "FROM foo\nADAPTER adapter1\nLICENSE MIT\nPARAMETER param1 value1\nPARAMETER param2 value2\n"
        "TEMPLATE template1\nMESSAGE system You are a file parser. Always parse things.\nMESSAGE user Hey there!\n"
        "MESSAGE assistant Hello, I want to parse all the things!\n",
    ),
    (
        "\nFROM foo\nADAPTER adapter1\nLICENSE MIT\nPARAMETER param1 value1\nPARAMETER param2 value2\n"
        'TEMPLATE template1\nMESSAGE system """\nYou are a store greeter. Always respond with "Hello!".\n"""\n'
        "MESSAGE user Hey there!\nMESSAGE assistant Hello, I want to parse all the things!\n",
        "FROM foo\nADAPTER adapter1\nLICENSE MIT\nPARAMETER param1 value1\nPARAMETER param2 value2\n"
        'TEMPLATE template1\nMESSAGE system """\nYou are a store greeter. Always respond with "Hello!".\n"""\n'
        "MESSAGE user Hey there!\nMESSAGE assistant Hello, I want to parse all the things!\n",
    ),
    (
        '\nFROM foo\nADAPTER adapter1\nLICENSE """\nVery long and boring legal text.\nBlah blah blah.\n'
        '"Oh look, a quote!"\n"""\n\nPARAMETER param1 value1\nPARAMETER param2 value2\nTEMPLATE template1\n'
        'MESSAGE system """\nYou are a store greeter. Always respond with "Hello!".\n"""\nMESSAGE user Hey there!\n'
        "MESSAGE assistant Hello, I want to parse all the things!\n",
        'FROM foo\nADAPTER adapter1\nLICENSE """\nVery long and boring legal text.\nBlah blah blah.\n'
        '"Oh look, a quote!"\n"""\nPARAMETER param1 value1\nPARAMETER param2 value2\nTEMPLATE template1\n'
        'MESSAGE system """\nYou are a store greeter. Always respond with "Hello!".\n"""\nMESSAGE user Hey there!\n'
        "MESSAGE assistant Hello, I want to parse all the things!\n",
    ),
    ('\nFROM foo\nSYSTEM ""\n', "FROM foo\nSYSTEM \n"),
    (
        'FROM x\nSYSTEM "  padded  "\nPARAMETER stop "### User: "\nDRAFT ./d\nREQUIRES 0.14.0\nRENDERER r\n'
        'PARSER p\nPARAMETER stop """a\n"""\n',
        'FROM x\nSYSTEM "  padded  "\nPARAMETER stop "### User: "\nDRAFT ./d\nREQUIRES 0.14.0\nRENDERER r\n'
        'PARSER p\nPARAMETER stop "a\n"\n',
    ),
]


@pytest.mark.parametrize(("text", "ollama_string"), FORMAT_CASES)
def test_parse_format_parse(text, ollama_string):  # TestParseFileFormatParseFile, plus Ollama's String() output
    modelfile = parse_modelfile(text)
    assert modelfile.format() == ollama_string
    assert parse_modelfile(modelfile.format()) == modelfile


def test_empty_modelfile_formats_to_nothing():
    assert Modelfile().format() == ""


# --- where Ollama's text would lose the value ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (Command("system", '"quoted"'), 'SYSTEM """"quoted""""'),
        (Command("system", '"x'), 'SYSTEM """"x"""'),
        (Command("system", '"""'), 'SYSTEM """""""""'),
        (Command("system", "tab\t"), 'SYSTEM "tab\t"'),
        (Command("system", "\tlead"), 'SYSTEM "\tlead"'),
        (Command("system", "a\rb"), 'SYSTEM "a\rb"'),
        (Command("system", "a\r"), 'SYSTEM "a\r"'),
        (Command("model", " spaced "), 'FROM " spaced "'),
        (Command("model", '"m"'), 'FROM """"m""""'),
        (Command("stop", '"'), 'PARAMETER stop """""""'),
        (Command("message", 'user: "hi"'), 'MESSAGE user """"hi""""'),
    ],
)
def test_lossy_values_get_a_quoting_that_reads_back(command, expected):
    assert not ollama_reads_back(command)
    assert line_of(command) == expected
    assert parse_modelfile(f"{expected}\nFROM base\n").commands[0] == command


@pytest.mark.parametrize(
    "command",
    [
        Command("system", 'x"""\ny'),  # the first line would close any quote
        Command("system", 'x""" \t\ny'),
        Command("template", '"""\r\n'),
        Command("system", "bell\x07"),  # Ollama drops non-printable runes
        Command("system", "nbsp\xa0"),
        Command("model", "a\x1bb"),
    ],
)
def test_unrepresentable_values_raise(command):
    with pytest.raises(ModelfileError, match="cannot write"):
        Modelfile([Command("model", "m"), command]).format()


def test_unrepresentable_error_says_why():
    with pytest.raises(ModelfileError, match="U\\+001B"):
        line_of(Command("system", "\x1b[31m"))
    with pytest.raises(ModelfileError, match='ends with """'):
        line_of(Command("system", 'a"""\nb'))


def test_a_line_ending_in_a_quote_needs_triple_quotes():
    command = Command("system", 'a"\nb')  # "a"  would close a "..." value at the first line
    assert line_of(command) == 'SYSTEM """a"\nb"""' == ollama_line(command)
    assert Modelfile([command, Command("model", "m")]).format().count('"""') == 2


def test_triple_quotes_inside_a_single_line_value_are_fine():
    command = Command("system", 'say """ twice """ here')
    assert line_of(command) == 'SYSTEM say """ twice """ here'
    assert line_of(Command("system", ' """x"""')) == 'SYSTEM """ """x""""""'
    assert parse_modelfile('SYSTEM """ """x""""""\nFROM m').commands[0] == Command("system", ' """x"""')


def test_empty_value_is_written_as_ollama_does():
    assert line_of(Command("system", "")) == "SYSTEM "
    assert line_of(Command("model", "")) == "FROM "


def test_message_without_a_valid_role_is_written_as_a_parameter():
    # "PARAMETER message foo" parses to Command("message", "foo"), which no MESSAGE line can give back
    modelfile = parse_modelfile("FROM x\nPARAMETER message foo\nPARAMETER message tool: hi\n")
    assert modelfile.format() == "FROM x\nPARAMETER message foo\nPARAMETER message tool: hi\n"
    assert reparse(modelfile) == modelfile.commands


def test_parameter_names():
    assert line_of(Command("", "v")) == "PARAMETER  v"
    assert parse_modelfile("FROM x\nPARAMETER  v\n").commands[1] == Command("", "v")
    assert line_of(Command("Temperature", "1")) == "PARAMETER Temperature 1"
    assert line_of(Command("from", "x")) == "PARAMETER from x"
    with pytest.raises(ModelfileError):
        line_of(Command("num-ctx", "1"))
    with pytest.raises(ModelfileError):
        line_of(Command("a b", "1"))


def test_format_handles_crlf_files():
    modelfile = parse_modelfile(b'FROM x\r\nSYSTEM """one\r\ntwo\r\n"""\r\nPARAMETER stop a\r\n')
    assert modelfile.format() == 'FROM x\nSYSTEM "one\r\ntwo\r\n"\nPARAMETER stop a\n'
    assert reparse(modelfile) == modelfile.commands


# --- reading helpers -----------------------------------------------------------------------------------------
SAMPLE = """FROM llama3.2
FROM ./projector.gguf
REQUIRES 0.14.0
ADAPTER ./lora-a.gguf
ADAPTER ./lora-b.gguf
SYSTEM first
SYSTEM second
TEMPLATE {{ .Prompt }}
RENDERER qwen3
PARSER qwen3
DRAFT ./draft.gguf
PARAMETER temperature 0.7
PARAMETER stop <|a|>
PARAMETER Temperature 1
PARAMETER stop <|b|>
LICENSE MIT
LICENSE Apache
MESSAGE user hi
MESSAGE assistant hello: there
"""


def test_accessors():
    modelfile = parse_modelfile(SAMPLE)
    assert modelfile.froms() == ["llama3.2", "./projector.gguf"]
    assert modelfile.system == "second"
    assert modelfile.template == "{{ .Prompt }}"
    assert modelfile.adapters() == ["./lora-a.gguf", "./lora-b.gguf"]
    assert modelfile.licenses() == ["MIT", "Apache"]
    assert modelfile.messages() == [("user", "hi"), ("assistant", "hello: there")]
    assert modelfile.parameters() == {"temperature": ["0.7"], "stop": ["<|a|>", "<|b|>"], "Temperature": ["1"]}
    assert modelfile.single("requires") == "0.14.0"
    assert modelfile.single("renderer") == "qwen3"
    assert modelfile.single("parser") == "qwen3"
    assert modelfile.single("draft") == "./draft.gguf"
    assert modelfile.single("nothing") is None
    empty = Modelfile()
    assert (empty.system, empty.template, empty.froms(), empty.parameters(), empty.messages()) == (
        None,
        None,
        [],
        {},
        [],
    )


def test_messages_split_at_the_first_colon_space():
    modelfile = Modelfile([Command("message", "user: a: b"), Command("message", "odd")])
    assert modelfile.messages() == [("user", "a: b"), ("odd", "")]


def test_instructions():
    modelfile = parse_modelfile(SAMPLE)
    items = modelfile.instructions()
    assert items[0] == {"instruction": "FROM", "value": "llama3.2"}
    assert items[2] == {"instruction": "REQUIRES", "value": "0.14.0"}
    assert {"instruction": "PARAMETER", "name": "Temperature", "value": "1"} in items
    assert items[-1] == {"instruction": "MESSAGE", "role": "assistant", "value": "hello: there"}
    assert [i["instruction"] for i in items] == [
        "FROM",
        "FROM",
        "REQUIRES",
        "ADAPTER",
        "ADAPTER",
        "SYSTEM",
        "SYSTEM",
        "TEMPLATE",
        "RENDERER",
        "PARSER",
        "DRAFT",
        "PARAMETER",
        "PARAMETER",
        "PARAMETER",
        "PARAMETER",
        "LICENSE",
        "LICENSE",
        "MESSAGE",
        "MESSAGE",
    ]


# --- editing helpers ---------------------------------------------------------------------------------------------
def test_set_single_replaces_in_place_and_removes():
    modelfile = parse_modelfile("FROM a\nSYSTEM one\nPARAMETER top_k 1\nSYSTEM two\n")
    modelfile.set_single("system", "new")
    assert modelfile.format() == "FROM a\nSYSTEM new\nPARAMETER top_k 1\n"
    modelfile.set_single("system", None)
    assert modelfile.format() == "FROM a\nPARAMETER top_k 1\n"


def test_set_single_appends_in_ollama_show_order():
    modelfile = parse_modelfile("FROM a\nPARAMETER top_k 1\nMESSAGE user hi\n")
    modelfile.set_single("system", "s")
    modelfile.set_single("requires", "0.14.0")
    modelfile.set_single("template", "t")
    assert modelfile.format() == ("FROM a\nREQUIRES 0.14.0\nTEMPLATE t\nSYSTEM s\nPARAMETER top_k 1\nMESSAGE user hi\n")
    fresh = Modelfile()
    fresh.set_single("system", "s")
    fresh.set_single("model", "m")
    assert fresh.format() == "FROM m\nSYSTEM s\n"


def test_set_list():
    modelfile = parse_modelfile("FROM a\nLICENSE x\nSYSTEM s\nLICENSE y\n")
    modelfile.set_list("license", ["MIT", "BSD"])
    assert modelfile.format() == "FROM a\nLICENSE MIT\nLICENSE BSD\nSYSTEM s\n"
    modelfile.set_list("adapter", ["./a.gguf"])
    assert modelfile.format() == "FROM a\nADAPTER ./a.gguf\nLICENSE MIT\nLICENSE BSD\nSYSTEM s\n"
    modelfile.set_list("model", ["b", "./p.gguf"])
    assert modelfile.froms() == ["b", "./p.gguf"]
    modelfile.set_list("license", [])
    assert modelfile.licenses() == []


def test_set_parameters_replaces_every_parameter():
    modelfile = parse_modelfile("FROM a\nPARAMETER top_k 1\nSYSTEM s\nPARAMETER stop x\nMESSAGE user hi\n")
    modelfile.set_parameters([("temperature", "0.2"), ("stop", "<a>"), ("stop", "<b>")])
    assert modelfile.format() == (
        "FROM a\nPARAMETER temperature 0.2\nPARAMETER stop <a>\nPARAMETER stop <b>\nSYSTEM s\nMESSAGE user hi\n"
    )
    modelfile.set_parameters([])
    assert modelfile.parameters() == {}
    modelfile.set_parameters([("num_ctx", "4096")])
    assert modelfile.format() == "FROM a\nSYSTEM s\nPARAMETER num_ctx 4096\nMESSAGE user hi\n"


@pytest.mark.parametrize("name", ["system", "model", "message", "num-ctx", "", "a b"])
def test_set_parameters_refuses_names_that_are_not_parameters(name):
    with pytest.raises(ModelfileError):
        Modelfile().set_parameters([(name, "1")])


def test_set_messages():
    modelfile = parse_modelfile("FROM a\nMESSAGE user old\nLICENSE l\n")
    modelfile.set_messages([("system", "be brief"), ("user", "two\nlines")])
    assert modelfile.format() == 'FROM a\nMESSAGE system be brief\nMESSAGE user "two\nlines"\nLICENSE l\n'
    assert modelfile.messages() == [("system", "be brief"), ("user", "two\nlines")]
    with pytest.raises(ModelfileError, match="message role"):
        modelfile.set_messages([("tool", "x")])


# --- properties --------------------------------------------------------------------------------------------------
TRICKY = st.sampled_from(
    ['"', '"""', "'", " ", "  ", "\t", "\n", "\r\n", "\r", "#", "\\", "a", "b c", "é", "🦙", "\xa0"]
)
VALUES = st.lists(st.one_of(TRICKY, st.text(max_size=3)), max_size=10).map("".join)
SAFE_VALUES = VALUES.filter(lambda v: "\x00" not in v)
KEYWORDS = st.sampled_from(
    ["FROM", "from", "SYSTEM", "TEMPLATE", "LICENSE", "ADAPTER", "PARAMETER stop", "PARAMETER top_k", "MESSAGE user"]
)


@st.composite
def modelfile_texts(draw) -> str:
    """Modelfile-like text: instruction lines with raw, "quoted" or triple-quoted tricky values."""
    lines = ["FROM base"]
    for _ in range(draw(st.integers(0, 6))):
        value = draw(VALUES)
        wrap = draw(st.sampled_from(["", '"', '"""']))
        lines.append(draw(KEYWORDS) + draw(st.sampled_from([" ", "\t", "  "])) + wrap + value + wrap)
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    return newline.join(draw(st.permutations(lines))) + draw(st.sampled_from(["", newline]))


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(modelfile_texts())
def test_round_trip_of_parsed_text(text):
    try:
        modelfile = parse_modelfile(text)
    except ModelfileError:
        assume(False)
        return
    written = modelfile.format()
    again = parse_modelfile(written)
    assert again == modelfile
    assert again.format() == written  # canonical: a second pass changes nothing


def unrepresentable(value: str) -> bool:
    """The exact set no quoting can hold (see _write_value): a line break right after \"\"\" and blanks."""
    return any(ch in "\r\n" and value[:i].rstrip(" \t\r\n").endswith('"""') for i, ch in enumerate(value))


NAMES = st.sampled_from(["model", *NAMED, "stop", "temperature", "Top_K", "", "message"])


@st.composite
def command_lists(draw) -> list[Command]:
    result = [Command("model", "base")]
    for _ in range(draw(st.integers(0, 5))):
        name = draw(NAMES)
        value = draw(VALUES)
        if name == "message" and draw(st.booleans()):
            value = draw(st.sampled_from(["system", "user", "assistant"])) + ": " + value
        result.insert(draw(st.integers(0, len(result))), Command(name, value))
    return result


def printable(value: str) -> bool:
    """Whether Ollama keeps every character (checked through the parser itself)."""
    kept = value.replace("\r", "").replace("\n", "").replace("\t", "").replace('"', "")
    return parse_modelfile(f"FROM m\nSYSTEM x{kept}x\n").commands[1].args == f"x{kept}x"


@settings(max_examples=400, deadline=None, database=None)
@given(command_lists())
def test_format_never_writes_something_that_reads_differently(commands):
    modelfile = Modelfile(commands)
    values = [c.args.partition(": ")[2] if c.name == "message" else c.args for c in commands]
    try:
        text = modelfile.format()
    except ModelfileError:
        assert any(unrepresentable(v) or not printable(v) for v in [c.args for c in commands] + values)
        return
    assert parse_modelfile(text).commands == commands


@settings(max_examples=400, deadline=None, database=None)
@given(SAFE_VALUES)
def test_the_unrepresentable_set_is_exact(value):
    command = Command("system", value)
    if not printable(value) or unrepresentable(value):
        with pytest.raises(ModelfileError):
            line_of(command)
    else:
        assert parse_modelfile(line_of(command) + "\nFROM m").commands[0] == command


@settings(max_examples=400, deadline=None, database=None)
@given(command_lists())
def test_ollamas_text_is_kept_whenever_it_reads_back(commands):
    for command in commands:
        if ollama_reads_back(command):
            assert line_of(command) == ollama_line(command)
