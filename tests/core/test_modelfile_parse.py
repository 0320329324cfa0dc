"""Conformance of app.core.modelfile.parser's parser with Ollama's (parser/parser.go at v0.33.0-rc2).

The first part ports every parsing case of Ollama's parser/parser_test.go (same input, same commands or
error). The table after it was produced by running Ollama's ParseFile itself on each input (built against
the same parser.go), so each row is what Ollama answers. The rest pins the rules of REFERENCE.md §1.2-1.3.
"""

from __future__ import annotations

import codecs

import pytest

from app.core.modelfile.parser import INSTRUCTIONS, Command, Modelfile, ModelfileError, parse_modelfile

COMMAND_ERROR = (
    'command must be one of "from", "license", "template", "system", "adapter", "draft", "renderer", '
    '"parser", "parameter", "message", or "requires"'
)
ROLE_ERROR = 'message role must be one of "system", "user", or "assistant"'


def bad_command(line: int) -> str:
    return f"(line {line}): {COMMAND_ERROR}"


def bad_role(line: int) -> str:
    return f"(line {line}): {ROLE_ERROR}"


def commands(data: str | bytes) -> list[tuple[str, str]]:
    return [(c.name, c.args) for c in parse_modelfile(data).commands]


def error(data: str | bytes) -> ModelfileError:
    with pytest.raises(ModelfileError) as info:
        parse_modelfile(data)
    return info.value


LLAMA3_TEMPLATE = (
    "{{ if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>{{ end }}"
    "{{ if .Prompt }}<|start_header_id|>user<|end_header_id|>\n\n{{ .Prompt }}<|eot_id|>{{ end }}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n{{ .Response }}<|eot_id|>"
)


# --- parser_test.go ------------------------------------------------------------------------------------------------
def test_parse_file_file():  # TestParseFileFile
    text = (
        "\nFROM model1\nADAPTER adapter1\nLICENSE MIT\nPARAMETER param1 value1\nPARAMETER param2 value2\n"
        f'TEMPLATE """{LLAMA3_TEMPLATE}"""    \n'
    )
    assert commands(text) == [
        ("model", "model1"),
        ("adapter", "adapter1"),
        ("license", "MIT"),
        ("param1", "value1"),
        ("param2", "value2"),
        ("template", LLAMA3_TEMPLATE),
    ]


def test_parse_file_draft():  # TestParseFileDraft
    modelfile = parse_modelfile("\nFROM base\nDRAFT ./assistant\n")
    assert commands("\nFROM base\nDRAFT ./assistant\n") == [("model", "base"), ("draft", "./assistant")]
    assert "DRAFT ./assistant" in modelfile.format()


def test_parse_file_trim_space():  # TestParseFileTrimSpace
    template = "   " + LLAMA3_TEMPLATE + "   "
    text = (
        '\nFROM "     model 1"\nADAPTER      adapter3\nLICENSE "MIT       "\nPARAMETER param1        value1\n'
        f'PARAMETER param2    value2\nTEMPLATE """{template}"""    \n'
    )
    assert commands(text) == [
        ("model", "     model 1"),
        ("adapter", "adapter3"),
        ("license", "MIT       "),
        ("param1", "value1"),
        ("param2", "value2"),
        ("template", template),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('FROM "FOO  BAR  "', [("model", "FOO  BAR  ")]),
        ('FROM "FOO BAR"\nPARAMETER param1 value1', [("model", "FOO BAR"), ("param1", "value1")]),
        ("FROM     FOOO BAR    ", [("model", "FOOO BAR")]),
        ("FROM /what/is/the path ", [("model", "/what/is/the path")]),
        ("FROM foo", [("model", "foo")]),
        ("FROM /path/to/model", [("model", "/path/to/model")]),
        ("FROM /path/to/model/fp16.bin", [("model", "/path/to/model/fp16.bin")]),
        ("FROM llama3:latest", [("model", "llama3:latest")]),
        ("FROM llama3:7b-instruct-q4_K_M", [("model", "llama3:7b-instruct-q4_K_M")]),
        ("", "no FROM line"),
        ("PARAMETER param1 value1", "no FROM line"),
        ("PARAMETER param1 value1\nFROM foo", [("param1", "value1"), ("model", "foo")]),
        ("PARAMETER what the \nFROM lemons make lemonade ", [("what", "the"), ("model", "lemons make lemonade")]),
    ],
)
def test_parse_file_from(text, expected):  # TestParseFileFrom
    if isinstance(expected, str):
        assert str(error(text)) == expected
    else:
        assert commands(text) == expected


def test_parse_file_parameters_missing_value():  # TestParseFileParametersMissingValue
    assert str(error("\nFROM foo\nPARAMETER param1\n")) == "unexpected EOF: param1"


def test_parse_file_bad_command():  # TestParseFileBadCommand
    exc = error("\nFROM foo\nBADCOMMAND param1 value1\n")
    assert str(exc) == bad_command(3)
    assert exc.line == 3


def test_parse_file_renderer():  # TestParseFileRenderer
    assert commands("\nFROM foo\nRENDERER renderer1\n") == [("model", "foo"), ("renderer", "renderer1")]


def test_parse_file_parser():  # TestParseFileParser
    assert commands("\nFROM foo\nPARSER parser1\n") == [("model", "foo"), ("parser", "parser1")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "\nFROM foo\nMESSAGE system You are a file parser. Always parse things.\n",
            [("model", "foo"), ("message", "system: You are a file parser. Always parse things.")],
        ),
        (
            "\nFROM foo\nMESSAGE system You are a file parser. Always parse things.",
            [("model", "foo"), ("message", "system: You are a file parser. Always parse things.")],
        ),
        (
            "\nFROM foo\nMESSAGE system You are a file parser. Always parse things.\nMESSAGE user Hey there!\n"
            "MESSAGE assistant Hello, I want to parse all the things!\n",
            [
                ("model", "foo"),
                ("message", "system: You are a file parser. Always parse things."),
                ("message", "user: Hey there!"),
                ("message", "assistant: Hello, I want to parse all the things!"),
            ],
        ),
        (
            '\nFROM foo\nMESSAGE system """\nYou are a multiline file parser. Always parse things.\n"""\n\t\t\t',
            [("model", "foo"), ("message", "system: \nYou are a multiline file parser. Always parse things.\n")],
        ),
        ("\nFROM foo\nMESSAGE badguy I'm a bad guy!\n", bad_role(3)),
        ("\nFROM foo\nMESSAGE system\n", "unexpected EOF: system"),
        ("\nFROM foo\nMESSAGE system", "unexpected EOF"),
    ],
)
def test_parse_file_messages(text, expected):  # TestParseFileMessages
    if isinstance(expected, str):
        assert str(error(text)) == expected
    else:
        assert commands(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('\nFROM foo\nSYSTEM """\nThis is a\nmultiline system.\n"""\n\t\t\t', "\nThis is a\nmultiline system.\n"),
        ('\nFROM foo\nSYSTEM """\nThis is a\nmultiline system."""\n\t\t\t', "\nThis is a\nmultiline system."),
        ('\nFROM foo\nSYSTEM """This is a\nmultiline system."""\n\t\t\t', "This is a\nmultiline system."),
        ('\nFROM foo\nSYSTEM """This is a multiline system."""\n\t\t\t', "This is a multiline system."),
        ('\nFROM foo\nSYSTEM """This is a multiline system.""\n\t\t\t', None),
        ('\nFROM foo\nSYSTEM "\n\t\t\t', None),
        (
            '\nFROM foo\nSYSTEM """\nThis is a multiline system with "quotes".\n"""\n',
            '\nThis is a multiline system with "quotes".\n',
        ),
        ('\nFROM foo\nSYSTEM """"""\n', ""),
        ('\nFROM foo\nSYSTEM ""\n', ""),
        ('\nFROM foo\nSYSTEM "\'"\n', "'"),
        ('\nFROM foo\nSYSTEM """\'\'"\'""\'""\'"\'\'\'\'\'""\'""\'"""\n', "''\"'\"\"'\"\"'\"'''''\"\"'\"\"'"),
    ],
)
def test_parse_file_quoted(text, expected):  # TestParseFileQuoted
    if expected is None:
        assert str(error(text)) == "unexpected EOF"
    else:
        assert commands(text) == [("model", "foo"), ("system", expected)]


def test_parse_file_quoted_template_at_eof():  # TestParseFileQuoted, last case
    assert commands('\nFROM foo\nTEMPLATE """\n{{ .Prompt }}\n"""') == [
        ("model", "foo"),
        ("template", "\n{{ .Prompt }}\n"),
    ]


@pytest.mark.parametrize(
    ("line", "name", "value"),
    [
        ("numa true", "numa", "true"),
        ("num_ctx 1", "num_ctx", "1"),
        ("num_batch 1", "num_batch", "1"),
        ("num_gqa 1", "num_gqa", "1"),
        ("num_gpu 1", "num_gpu", "1"),
        ("main_gpu 1", "main_gpu", "1"),
        ("use_mmap true", "use_mmap", "true"),
        ("num_thread 1", "num_thread", "1"),
        ("num_keep 1", "num_keep", "1"),
        ("seed 1", "seed", "1"),
        ("num_predict 1", "num_predict", "1"),
        ("top_k 1", "top_k", "1"),
        ("top_p 1.0", "top_p", "1.0"),
        ("min_p 0.05", "min_p", "0.05"),
        ("typical_p 1.0", "typical_p", "1.0"),
        ("repeat_last_n 1", "repeat_last_n", "1"),
        ("temperature 1.0", "temperature", "1.0"),
        ("repeat_penalty 1.0", "repeat_penalty", "1.0"),
        ("presence_penalty 1.0", "presence_penalty", "1.0"),
        ("frequency_penalty 1.0", "frequency_penalty", "1.0"),
        ("penalize_newline true", "penalize_newline", "true"),
        ("stop ### User:", "stop", "### User:"),
        ("stop ### User: ", "stop", "### User:"),
        ('stop "### User:"', "stop", "### User:"),
        ('stop "### User: "', "stop", "### User: "),
        ('stop """### User:"""', "stop", "### User:"),
        ('stop """### User:\n"""', "stop", "### User:\n"),
        ("stop <|endoftext|>", "stop", "<|endoftext|>"),
        ("stop <|eot_id|>", "stop", "<|eot_id|>"),
        ("stop </s>", "stop", "</s>"),
    ],
)
def test_parse_file_parameters(line, name, value):  # TestParseFileParameters
    assert commands(f"FROM foo\nPARAMETER {line}\n") == [("model", "foo"), (name, value)]


def test_parse_file_comments():  # TestParseFileComments
    assert commands("\n# comment\nFROM foo\n\t") == [("model", "foo")]


UTF16_TEXT = "FROM bob\nPARAMETER param1 1\nPARAMETER param2 4096\nSYSTEM You are a utf16 file.\n"
UTF16_EXPECTED = [("model", "bob"), ("param1", "1"), ("param2", "4096"), ("system", "You are a utf16 file.")]


@pytest.mark.parametrize(("bom", "codec"), [(codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")])
def test_parse_file_utf16(bom, codec):  # TestParseFileUTF16ParseFile
    assert commands(bom + UTF16_TEXT.encode(codec)) == UTF16_EXPECTED


@pytest.mark.parametrize(
    "encode",
    [
        lambda t: t.encode("utf-8"),
        lambda t: codecs.BOM_UTF16_LE + t.encode("utf-16-le"),  # x/text's UTF16(LittleEndian, UseBOM)
        lambda t: codecs.BOM_UTF16_BE + t.encode("utf-16-be"),
    ],
    ids=["utf8", "utf16le", "utf16be"],
)
def test_parse_multi_byte(encode):  # TestParseMultiByte
    assert commands(encode("FROM test\n\tSYSTEM 你好👋")) == [("model", "test"), ("system", "你好👋")]


# --- answers of Ollama's ParseFile ----------------------------------------------------------------------------------
GOLDEN = [
    (b"FROM x\nSYSTEM a # b\n", [("model", "x"), ("system", "a # b")]),
    (b"FROM x\nPARAMETER temperature 0.7 # x\n", [("model", "x"), ("temperature", "0.7 # x")]),
    (b"FROM x\n  # indented comment\n\t# tab comment\nSYSTEM s\n", [("model", "x"), ("system", "s")]),
    (b"FROM x # not a comment\n", [("model", "x # not a comment")]),
    (b"# only a comment", "no FROM line"),
    (b"FROM x\n#FROM y\n", [("model", "x")]),
    (b"from x\nSyStEm hi\npArAmEtEr Top_K 1\n", [("model", "x"), ("system", "hi"), ("Top_K", "1")]),
    (b"FROM x\nPARAMETER Temperature 1\n", [("model", "x"), ("Temperature", "1")]),
    (b"FROM x\nPARAMETER num-ctx 1\n", "unexpected EOF: num"),
    (b"FROM x\nPARAMETER p\n", "unexpected EOF: p"),
    (b"FROM x\nPARAMETER p", "unexpected EOF"),
    (b"FROM x\nPARAMETER \n", "unexpected EOF: "),
    (b"FROM x\nPARAMETER  v\n", [("model", "x"), ("", "v")]),
    (b"FROM x\nMESSAGE  user hi\n", bad_role(2)),
    (b"FROM x\nMESSAGE User hi\n", bad_role(2)),
    (b"FROM x\nMESSAGE tool hi\n", bad_role(2)),
    (b"FROM x\nMESSAGE user\thi\n", [("model", "x"), ("message", "user: hi")]),
    (b"FROM x\nMESSAGE user \n", [("model", "x"), ("message", "user: ")]),
    (b"FROM\n", bad_command(2)),
    (b"FROM", "unexpected EOF"),
    (b"FROM ", [("model", "")]),
    (b"FROM \n", [("model", "")]),
    (b"FROM\tx\n", [("model", "x")]),
    (b"FROM:x\n", bad_command(1)),
    (b"FROM1 x\n", bad_command(1)),
    (b"1FROM x\n", bad_command(1)),
    (b"\xc2\xa0FROM x\n", [("model", "x")]),
    (b"\x00FROM x\n", [("model", "x")]),
    (b"\xe2\x80\x8bFROM x\n", [("model", "x")]),
    (b"FROM foo\r\nBAD x\r\n", bad_command(3)),
    (b'FROM foo\r\nSYSTEM """a\r\nb"""\r\n', [("model", "foo"), ("system", "a\r\nb")]),
    (b"FROM foo\rSYSTEM s\r", [("model", "foo"), ("system", "s")]),
    (b"FROM foo\n\n\nBAD x\n", bad_command(4)),
    (b"FROM foo\r\n\r\nMESSAGE bad x\r\n", bad_role(5)),
    (b'FROM x\nSYSTEM \\"x\\"\n', [("model", "x"), ("system", '\\"x\\"')]),
    (b"FROM x\nSYSTEM 'quoted'\n", [("model", "x"), ("system", "'quoted'")]),
    (b'FROM x\nSYSTEM "abc" trailing\n', "unexpected EOF"),
    (b'FROM x\nSYSTEM "abc" trailing\nnext"\n', [("model", "x"), ("system", 'abc" trailing\nnext')]),
    (b'FROM x\nSYSTEM "a\n\nb"\n', [("model", "x"), ("system", "a\n\nb")]),
    (b'FROM x\nSYSTEM """a\n"""b\n"""\n', [("model", "x"), ("system", 'a\n"""b\n')]),
    (b'FROM x\nSYSTEM """"\n"\n', "unexpected EOF"),
    (b'FROM x\nSYSTEM """""""\n', [("model", "x"), ("system", '"')]),
    (b'FROM x\nSYSTEM "a"b"\n', [("model", "x"), ("system", 'a"b')]),
    (b'FROM x\nSYSTEM ""a"\n', [("model", "x"), ("system", '"a')]),
    (b'FROM x\nSYSTEM "\n', "unexpected EOF"),
    (b'FROM x\nSYSTEM """\n', "unexpected EOF"),
    (b'FROM x\nSYSTEM """x"""   \t\n', [("model", "x"), ("system", "x")]),
    (b'FROM x\nSYSTEM "  padded  "\n', [("model", "x"), ("system", "  padded  ")]),
    (b"FROM x\nSYSTEM    spaced   out   \t\n", [("model", "x"), ("system", "spaced   out")]),
    (b"FROM x\nSYSTEM a\x1bb\x0cc\n", [("model", "x"), ("system", "abc")]),
    (b"FROM x\nSYSTEM a\xc2\xa0b\xe3\x80\x80c\n", [("model", "x"), ("system", "abc")]),
    (b"FROM x\nSYSTEM a\tb\n", [("model", "x"), ("system", "a\tb")]),
    (b"FROM x\nSYSTEM \xf0\x9f\xab\xa8 shaking\n", [("model", "x"), ("system", "\U0001fae8 shaking")]),
    (b"FROM x\nSYSTEM \xef\xbb\xbfbom\n", [("model", "x"), ("system", "bom")]),
    (b"\xef\xbb\xbfFROM x\n", [("model", "x")]),
    (b"\xef\xbb\xbf\xef\xbb\xbfFROM x\n", [("model", "x")]),
    (b"FROM x\nSYSTEM a\xe2\x82b\n", [("model", "x"), ("system", "a�b")]),
    (b"\xef\xbb\xbfFROM x\nSYSTEM a\xe2\x82b\n", [("model", "x"), ("system", "a��b")]),
    (b"FROM x\nSYSTEM a\xf0\x9f\x98b\n", [("model", "x"), ("system", "a�b")]),
    (b"\xef\xbb\xbfFROM x\nSYSTEM a\xf0\x9f\x98b\n", [("model", "x"), ("system", "a���b")]),
    (b"FROM x\nSYSTEM a\xed\xa0\x80b\n", [("model", "x"), ("system", "a���b")]),
    (
        b"\xff\xfeF\x00R\x00O\x00M\x00 \x00x\x00\n\x00S\x00Y\x00S\x00T\x00E\x00M\x00 \x00a\x00\x00\xdc\x00\xdcb\x00",
        [("model", "x"), ("system", "a�b")],
    ),
    (
        b"\xff\xfeF\x00R\x00O\x00M\x00 \x00x\x00\n\x00S\x00Y\x00S\x00T\x00E\x00M\x00 \x00a\x00\x00\xd8b\x00",
        [("model", "x"), ("system", "a�b")],
    ),
    (
        b"\xff\xfeF\x00R\x00O\x00M\x00 \x00x\x00\n\x00S\x00Y\x00S\x00T\x00E\x00M\x00 \x00a\x00\x00\xd8",
        [("model", "x"), ("system", "a�")],
    ),
    (
        b"\xff\xfeF\x00R\x00O\x00M\x00 \x00x\x00\n\x00S\x00Y\x00S\x00T\x00E\x00M\x00 \x00a\x00b",
        [("model", "x"), ("system", "a�")],
    ),
    (b"\xfe\xff\x00F\x00R\x00O\x00M\x00 \x00y", [("model", "y")]),
    (
        b"FROM x\nPARAMETER stop a\nPARAMETER stop b\nPARAMETER temperature 1\nPARAMETER temperature 2\n",
        [("model", "x"), ("stop", "a"), ("stop", "b"), ("temperature", "1"), ("temperature", "2")],
    ),
    (b'FROM a\nFROM b\nFROM "  c"\n', [("model", "a"), ("model", "b"), ("model", "  c")]),
    (b"PARAMETER model x\n", [("model", "x")]),
    (b"FROM x\nPARAMETER message foo\n", [("model", "x"), ("message", "foo")]),
    (b"FROM x\nPARAMETER system s\n", [("model", "x"), ("system", "s")]),
    (
        b"FROM x\nREQUIRES 0.14.0\nRENDERER r\nPARSER p\nDRAFT ./d\nADAPTER ./a\nLICENSE l\n",
        [
            ("model", "x"),
            ("requires", "0.14.0"),
            ("renderer", "r"),
            ("parser", "p"),
            ("draft", "./d"),
            ("adapter", "./a"),
            ("license", "l"),
        ],
    ),
    (b'FROM x\nTEMPLATE """{{ .Prompt }}"""\n', [("model", "x"), ("template", "{{ .Prompt }}")]),
    (b'FROM x\nSYSTEM """a""""\n', [("model", "x"), ("system", 'a"')]),
    (b'FROM x\nSYSTEM """a""" b"""\n', [("model", "x"), ("system", 'a""" b')]),
]


@pytest.mark.parametrize(("data", "expected"), GOLDEN)
def test_matches_ollama(data, expected):
    if isinstance(expected, str):
        exc = error(data)
        assert str(exc) == expected
        assert exc.line == (int(expected[6 : expected.index(")")]) if expected.startswith("(line ") else None)
    else:
        assert commands(data) == expected


# --- the rules, one by one ----------------------------------------------------------------------------------------
def test_instructions_constant():
    assert INSTRUCTIONS == (
        "FROM",
        "LICENSE",
        "TEMPLATE",
        "SYSTEM",
        "ADAPTER",
        "DRAFT",
        "RENDERER",
        "PARSER",
        "PARAMETER",
        "MESSAGE",
        "REQUIRES",
    )


def test_error_is_a_value_error_with_line():
    exc = error("FROM x\nNOPE y\n")
    assert isinstance(exc, ValueError)
    assert exc.line == 2
    assert error("FROM x\nPARAMETER p\n").line is None
    assert error("SYSTEM s\n").line is None


@pytest.mark.parametrize("keyword", [*INSTRUCTIONS, *(k.lower() for k in INSTRUCTIONS), "FrOm", "sYsTeM"])
def test_keywords_are_case_insensitive(keyword):
    args = {"parameter": "p v", "message": "user v"}.get(keyword.lower(), "v")
    parsed = parse_modelfile(f"FROM base\n{keyword} {args}\n").commands[-1]
    expected = {"from": "model", "parameter": "p", "message": "message"}.get(keyword.lower(), keyword.lower())
    assert parsed.name == expected


def test_parameter_names_keep_their_case():
    assert commands("FROM x\nPARAMETER Temperature 1\nPARAMETER NUM_ctx 2\n")[1:] == [
        ("Temperature", "1"),
        ("NUM_ctx", "2"),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("FROM\n", bad_command(2)),  # the newline is counted before the error
        ("FROM\r\n", bad_command(2)),
        ("FROM", "unexpected EOF"),
        ("FROM:x\n", bad_command(1)),
        ("FR0M x\n", bad_command(1)),
        ("SYSTEMS x\nFROM y\n", bad_command(1)),
        ("FROM x\n  NOPE y\n", bad_command(2)),
        ("FROM x\nMESSAGE\tbot hi\n", bad_role(2)),
        ("FROM x\nMESSAGE user", "unexpected EOF"),
        ("FROM x\nMESSAGE us3r hi\n", "unexpected EOF: us"),
        ("FROM x\nPARAMETER num-ctx 1\n", "unexpected EOF: num"),
        ("FROM x\nPARAMETER\tp\n", "unexpected EOF: p"),
        ("FROM x\nPARAMETER \n", "unexpected EOF: "),
        ("FROM x\nPARAMETER", "unexpected EOF"),
        ('FROM x\nSYSTEM "open\n', "unexpected EOF"),
        ("# just a comment\n", "no FROM line"),
        ("SYSTEM only\n", "no FROM line"),
    ],
)
def test_error_texts(text, expected):
    assert str(error(text)) == expected


def test_keyword_needs_space_or_tab():
    assert commands("FROM\tbase\nSYSTEM\t\thi\n") == [("model", "base"), ("system", "hi")]


def test_comment_only_where_an_instruction_starts():
    assert commands("# top\n   # indented\nFROM x # not a comment\nSYSTEM a#b\n") == [
        ("model", "x # not a comment"),
        ("system", "a#b"),
    ]
    assert commands("FROM x\n#SYSTEM hidden\n") == [("model", "x")]


def test_no_inline_comments_for_parameters():
    assert commands("FROM x\nPARAMETER temperature 0.7 # warm\n")[1] == ("temperature", "0.7 # warm")


def test_multi_line_values():
    assert commands('FROM x\nSYSTEM "one\ntwo"\n')[1] == ("system", "one\ntwo")
    assert commands('FROM x\nSYSTEM """one\n"two"\n"""\n')[1] == ("system", 'one\n"two"\n')


def test_text_after_closing_quote_keeps_reading():
    assert commands('FROM x\nSYSTEM "abc" more\nend"\n')[1] == ("system", 'abc" more\nend')
    assert str(error('FROM x\nSYSTEM "abc" more\n')) == "unexpected EOF"


def test_a_line_ending_in_triple_quotes_closes_the_block():
    assert commands('FROM x\nSYSTEM """a\nb"""\n') == [("model", "x"), ("system", "a\nb")]
    assert str(error('FROM x\nSYSTEM """a\nb"""\nc"""\n')) == bad_command(4)  # "c" then starts a keyword


def test_no_escapes_and_no_single_quotes():
    assert commands('FROM x\nSYSTEM \\"x\\"\n')[1] == ("system", '\\"x\\"')
    assert commands("FROM x\nSYSTEM 'x'\n")[1] == ("system", "'x'")
    assert commands('FROM x\nSYSTEM "a\\nb"\n')[1] == ("system", "a\\nb")


def test_values_are_trimmed_but_not_inside_quotes():
    assert commands("FROM   a  b  \t\nSYSTEM \t x \t\n") == [("model", "a  b"), ("system", "x")]
    assert commands('FROM x\nSYSTEM " x\t"\n')[1] == ("system", " x\t")


@pytest.mark.parametrize("value", ['""', '""""""', "", "   "])
def test_empty_values(value):
    assert commands(f"FROM x\nSYSTEM {value}\n")[1] == ("system", "")


def test_empty_value_at_end_of_file():
    assert commands("FROM x\nSYSTEM ") == [("model", "x"), ("system", "")]


@pytest.mark.parametrize(
    "dropped",
    ["\x1b", "\x0c", "\x0b", "\x00", "\x7f", "\x85", "\xa0", "\u3000", "\u200b", "\ufeff", "\u2028", "\ue000"],
)
def test_non_printable_runes_are_dropped(dropped):
    assert commands(f"FROM x\nSYSTEM a{dropped}b\n")[1] == ("system", "ab")
    assert commands(f'FROM x\nSYSTEM """a{dropped}\nb"""\n')[1] == ("system", "a\nb")


def test_tab_is_kept_inside_a_value():
    assert commands("FROM x\nSYSTEM a\tb\n")[1] == ("system", "a\tb")


def test_non_printable_rune_before_a_keyword_is_ignored():
    assert commands("\xa0FROM x\n\x1bSYSTEM y\n") == [("model", "x"), ("system", "y")]


def test_printability_follows_go_1_26_unicode_15():
    # U+1FAE8 (shaking face) is new in Unicode 15.0: kept. U+1FAE9 is Unicode 16.0: Ollama's Go drops it.
    assert commands("FROM x\nSYSTEM \U0001fae8\U0001fae9!\n")[1] == ("system", "\U0001fae8!")
    assert commands("FROM x\nSYSTEM \U00031350\U0002ebf0\n")[1] == ("system", "\U00031350")  # CJK ext H / ext I
    assert commands("FROM x\nSYSTEM \U000e0001\U0010fffd\U0001ffff.\n")[1] == ("system", ".")


def test_crlf_is_kept_inside_a_triple_quoted_block():
    assert commands(b'FROM x\r\nSYSTEM """a\r\nb\r\n"""\r\n')[1] == ("system", "a\r\nb\r\n")


def test_crlf_line_numbers_count_both_characters():
    assert str(error(b"FROM foo\r\nBAD x\r\n")) == bad_command(3)
    assert str(error(b"FROM foo\rBAD x\r")) == bad_command(2)
    assert str(error(b"FROM foo\r\n\r\nMESSAGE bot x\r\n")) == bad_role(5)


def test_utf8_bom_is_dropped():
    assert commands(codecs.BOM_UTF8 + b"FROM x\n") == [("model", "x")]
    assert commands("\ufeffFROM x\n") == [("model", "x")]


def test_utf16_without_bom_is_read_as_utf8():
    assert str(error("FROM x\n".encode("utf-16-le"))) == bad_command(1)


def test_invalid_utf8_becomes_replacement_characters():
    # without a BOM each ill-formed subsequence is one U+FFFD; after a UTF-8 BOM Go reads rune by rune: one per byte
    assert commands(b"FROM x\nSYSTEM a\xe2\x82b\xffc\n")[1] == ("system", "a\ufffdb\ufffdc")
    assert commands(codecs.BOM_UTF8 + b"FROM x\nSYSTEM a\xe2\x82b\n")[1] == ("system", "a\ufffd\ufffdb")


def test_str_and_bytes_agree():
    text = 'FROM llama3\nSYSTEM """Héllo "there"\n"""\nPARAMETER stop </s>\nMESSAGE user ¿qué?\n'
    assert parse_modelfile(text) == parse_modelfile(text.encode("utf-8"))
    assert parse_modelfile(bytearray(text.encode("utf-8"))) == parse_modelfile(text)


def test_from_anywhere_and_repeated():
    assert commands("SYSTEM s\nFROM a\nFROM b\n") == [("system", "s"), ("model", "a"), ("model", "b")]
    assert commands("PARAMETER model x\n") == [("model", "x")]  # a PARAMETER named model counts as a FROM


def test_parse_returns_a_modelfile():
    modelfile = parse_modelfile("FROM x\nSYSTEM s\n")
    assert modelfile == Modelfile([Command("model", "x"), Command("system", "s")])
