"""Tests for app.core.modelfile.go_template: Go text/template semantics and Ollama's prompt building.

The golden templates and expected prompts are Ollama's own: ``template/*.gotmpl`` with ``template/testdata/…``
(what Ollama's TestTemplate checks), the ``tools/testdata/qwen2.5.*`` files Ollama shipped until mid-2025, and
the cases of ``TestExecuteWithMessages`` for templates that do not use ``.Messages``. Expected values of the unit
tests were checked against Go's text/template.
"""

from __future__ import annotations

import datetime as dt

import pytest

from app.core.modelfile.go_template import TemplateError, render_go_template, render_ollama_prompt, template_variables

DATA = {
    "Name": "Ann",
    "N": 3,
    "F": 1.5,
    "T": True,
    "Fl": False,
    "S": "",
    "Nil": None,
    "L": ["a", "b", "c"],
    "E": [],
    "M": {"b": 2, "a": 1},
    "Msgs": [
        {"Role": "system", "Content": "sys"},
        {"Role": "user", "Content": "hi"},
        {"Role": "assistant", "Content": "yo"},
    ],
}


def render(template: str, data: object = DATA) -> str:
    return render_go_template(template, data)


# ---------------------------------------------------------------------------------------------------------------
# Go text/template, construct by construct
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("a  {{- .Name -}}  b", "aAnnb"),
        ("a \r\n\t{{- .Name }}\n\n b", "aAnn\n\n b"),
        ("{{ .Name -}}\n\n  x", "Annx"),
        ("{{-3}}|{{- 3 }}", "-3|3"),  # "{{-3}}" is the number -3: a trim marker needs a space after the dash
        ("line\n{{- range .L }}\n  {{ . }}\n{{- end }}\n", "line\n  a\n  b\n  c\n"),
    ],
)
def test_trim_markers(template: str, expected: str) -> None:
    assert render(template) == expected


def test_comments() -> None:
    assert render("x {{/* a comment */}} y") == "x  y"
    assert render("x {{- /* trimmed\non both sides */ -}} y") == "xy"
    assert render("{{/* {{ .Name }} is not run */}}") == ""


def test_if_else_if_else() -> None:
    template = '{{ if eq .Name "Bob" }}bob{{ else if .S }}s{{ else if .L }}list{{ else }}none{{ end }}'
    assert render(template) == "list"
    assert render(template, {**DATA, "L": []}) == "none"
    assert render("{{ if .T }}yes{{ end }}{{ if .Fl }}no{{ else }}else{{ end }}") == "yeselse"


@pytest.mark.parametrize(
    ("value", "truth"),
    [
        ("", False),
        ("x", True),
        (0, False),
        (0.0, False),
        (-1, True),
        ([], False),
        ({}, False),
        ({"k": 0}, True),
        (None, False),
        (True, True),
        (False, False),
    ],
)
def test_truthiness_like_go(value: object, truth: bool) -> None:
    assert render("{{ if .V }}T{{ else }}F{{ end }}", {"V": value}) == ("T" if truth else "F")
    assert render("{{ if .Missing }}T{{ else }}F{{ end }}", {}) == "F"


def test_range_with_index_element_and_else() -> None:
    assert render("{{ range .L }}[{{ . }}]{{ end }}") == "[a][b][c]"
    assert render("{{ range $i, $e := .L }}{{ $i }}={{ $e }} {{ end }}") == "0=a 1=b 2=c "
    assert render("{{ range $e := .L }}{{ $e }}{{ end }}") == "abc"  # one variable: the element
    assert render("{{ range .E }}x{{ else }}empty{{ end }}|{{ range .Nil }}x{{ else }}nil{{ end }}") == "empty|nil"
    assert render("{{ range $k, $v := .M }}{{ $k }}={{ $v }};{{ end }}") == "a=1;b=2;"  # maps in key order
    assert render("{{ range 3 }}{{ . }}{{ end }}") == "012"  # Go 1.22: range over an int
    assert render("{{ range .Msgs }}{{ $.Name }}:{{ .Role }} {{ end }}") == "Ann:system Ann:user Ann:assistant "


def test_break_and_continue() -> None:
    assert render('{{ range .L }}{{ if eq . "b" }}{{ continue }}{{ end }}{{ . }}{{ end }}') == "ac"
    assert render('{{ range .L }}{{ if eq . "b" }}{{ break }}{{ end }}{{ . }}{{ end }}') == "a"
    nested = '{{ range .L }}{{ range $.L }}{{ if eq . "b" }}{{ break }}{{ end }}{{ . }}{{ end }}{{ . }},{{ end }}'
    assert render(nested) == "aa,ab,ac,"  # break leaves the inner range only


def test_with_else_and_else_with() -> None:
    assert render("{{ with .Name }}<{{ . }}>{{ end }}{{ with .S }}x{{ else }}no{{ end }}") == "<Ann>no"
    assert render("{{ with $m := .M }}{{ $m.a }}{{ .b }}{{ end }}") == "12"
    assert render("{{ with .Missing }}x{{ else with .Name }}{{ . }}{{ end }}") == "Ann"  # Go 1.23


def test_variables_and_scoping() -> None:
    # "=" assigns the variable of an enclosing scope; ":=" declares one that ends with its block
    assert render("{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ $y := 3 }}{{ end }}{{ $x }}") == "2"
    assert render("{{ $x := 1 }}{{ range .L }}{{ $x = . }}{{ end }}{{ $x }}") == "c"
    assert render('{{ $x := "out" }}{{ with .Name }}{{ $x := . }}{{ $x }} {{ end }}{{ $x }}') == "Ann out"
    assert render("{{ $ := 1 }}{{ $ }}") == "1"
    assert render("{{ $d := . }}{{ with .M }}{{ $d.Name }}{{ end }}") == "Ann"
    with pytest.raises(TemplateError, match='undefined variable "\\$y"'):
        render("{{ if true }}{{ $y := 2 }}{{ end }}{{ $y }}")


def test_eq_takes_several_arguments_like_go() -> None:
    assert render('{{ eq .Name "Bob" "Ann" }} {{ eq .Name "Bob" "Eve" }} {{ eq 2 1 2 3 }}') == "true false true"
    assert render('{{ ne .Name "Bob" }} {{ eq .Nil nil }} {{ eq .Missing "x" }}') == "true true false"
    assert (
        render('{{ lt 1 2 }} {{ le 2 2 }} {{ gt 1 2 }} {{ ge 2.5 2.5 }} {{ lt "a" "b" }}')
        == "true true false true true"
    )
    with pytest.raises(TemplateError, match="error calling eq: incompatible types for comparison"):
        render('{{ eq 1 "1" }}')
    with pytest.raises(TemplateError, match="error calling eq: incompatible types for comparison"):
        render("{{ eq .F 1 }}")  # float64 and int do not compare in Go either


def test_and_or_return_operands_and_short_circuit() -> None:
    assert render('{{ and 1 0 2 }} {{ and 1 2 }} {{ or 0 "" }} {{ or 0 "x" 3 }}') == "0 2  x"
    assert render('{{ or .S "default" }} {{ and .Name .N }} {{ not .S }} {{ not .L }}') == "default 3 true false"
    # the operands after the deciding one are not evaluated (index out of range would fail)
    assert render("{{ if and .Fl (index .L 9) }}x{{ else }}short{{ end }}") == "short"
    assert render("{{ if or .T (index .L 9) }}short{{ end }}") == "short"


def test_len_index_slice() -> None:
    assert render('{{ len .L }} {{ len .M }} {{ len .E }} {{ len .Name }} {{ len "é" }}') == "3 2 0 3 2"  # bytes
    assert render('{{ index .L 1 }} {{ index .M "a" }} {{ index .Msgs 1 "Role" }} {{ index .Name 0 }}') == "b 1 user 65"
    assert render('{{ index .M "zz" }}') == "<no value>"
    assert render("{{ slice .L 1 }} {{ slice .L 1 2 }} {{ slice .Name 1 }} {{ slice .L }}") == "[b c] [b] nn [a b c]"
    assert render("{{ range slice .Msgs 2 }}{{ .Role }}{{ end }}") == "assistant"
    with pytest.raises(TemplateError, match="error calling index: index out of range: 5"):
        render("{{ index .L 5 }}")
    with pytest.raises(TemplateError, match="invalid slice index: 2 > 1"):
        render("{{ slice .L 2 1 }}")


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ('{{ printf "%s-%d-%v-%q" .Name .N .F .Name }}', 'Ann-3-1.5-"Ann"'),
        ('{{ printf "%5s|%-5s|%05d|%x|%X|%c|%t" "ab" "cd" 42 255 255 65 true }}', "   ab|cd   |00042|ff|FF|A|true"),
        (
            '{{ printf "%.2f %e %g %v %6.2f" 3.14159 1234.5 0.00001 100000000.0 2.5 }}',
            "3.14 1.234500e+03 1e-05 1e+08   2.50",
        ),
        ('{{ printf "%v %s %v" .L .L .M }}', "[a b c] [a b c] map[a:1 b:2]"),
        ('{{ printf "%d" .M }}', "map[%!d(string=a):1 %!d(string=b):2]"),  # the verb applies to keys too
        ('{{ printf "%q" "a\\"b\\n" }}', '"a\\"b\\n"'),
        (
            '{{ printf "%d" "x" }}|{{ printf "%d %d" 1 }}|{{ printf "%d" 1 2 }}',
            "%!d(string=x)|1 %!d(MISSING)|1%!(EXTRA int=2)",
        ),
        ('{{ printf "%s" .Nil }} {{ printf "%v" .Nil }} {{ printf "%%" }}', "%!s(<nil>) <nil> %"),
        ('{{ print 1 2 }} {{ print "a" 1 "b" }} {{ print 1 "a" 2 }} {{ print .Nil }}', "1 2 a1b 1a2 <nil>"),
        ('{{ println 1 "a" }}', "1 a\n"),
    ],
)
def test_print_printf_println(template: str, expected: str) -> None:
    assert render(template) == expected


def test_escaping_functions() -> None:
    s = "<a href=\"x\">'&'</a>"
    assert render("{{ html .S }}", {"S": s}) == "&lt;a href=&#34;x&#34;&gt;&#39;&amp;&#39;&lt;/a&gt;"
    assert render("{{ js .S }}", {"S": s}) == "\\u003Ca href\\u003D\\\"x\\\"\\u003E\\'\\u0026\\'\\u003C/a\\u003E"
    assert render('{{ urlquery "a/b?c=d&e f" }}') == "a%2Fb%3Fc%3Dd%26e+f"
    assert render("{{ html .Missing }}", {}) == "&lt;no value&gt;"


def test_nested_pipelines_and_parentheses() -> None:
    assert render('{{ .Name | printf "%s!" }} {{ .L | len }} {{ .Name | len | printf "%03d" }}') == "Ann! 3 003"
    assert render('{{ "x" | print "a" }}') == "ax"  # the piped value is the last argument
    assert render("{{ (index .Msgs 1).Role }} {{ len (index .Msgs 0).Content }} {{ (.M).a }}") == "user 3 1"
    last = "{{ range $i, $_ := .Msgs }}{{ .Role }}{{ if eq (len (slice $.Msgs $i)) 1 }}!{{ end }} {{ end }}"
    assert render(last) == "system user assistant! "


def test_printing_values_like_go() -> None:
    data = {"Mixed": [1, "a", None, True, 2.5, {"k": "v"}, [1, 2]], "Big": 1234567.0, "Small": 1e-7, "Int": 7}
    assert render("{{ .Mixed }}", data) == "[1 a <nil> true 2.5 map[k:v] [1 2]]"
    assert render("{{ .Big }} {{ .Small }} {{ .Int }} {{ 1.0 }} {{ 1e3 }}", data) == "1.234567e+06 1e-07 7 1 1000"
    assert render("{{ .Nil }}|{{ .Missing }}|{{ .M }}", DATA) == "<no value>|<no value>|map[a:1 b:2]"
    assert (
        render("{{ \"tab\\there\" }} {{ `raw\\n` }} {{ 'a' }} {{ 0x1F }} {{ true }}") == "tab\there raw\\n 97 31 true"
    )


def test_define_template_and_block() -> None:
    assert render('{{ define "t" }}[{{ . }}]{{ end }}{{ template "t" .Name }}{{ template "t" }}') == "[Ann][<no value>]"
    assert render('{{ block "b" .N }}<{{ . }}>{{ end }}') == "<3>"
    recursive = '{{ define "r" }}{{ if . }}{{ index . 0 }}{{ template "r" (slice . 1) }}{{ end }}{{ end }}'
    assert render(recursive + '{{ template "r" .L }}') == "abc"


def test_ollama_functions() -> None:
    today = dt.date(2025, 3, 1)
    assert render_go_template("{{ currentDate }} {{ yesterdayDate }}", {}, today=today) == "2025-03-01 2025-02-28"
    assert (
        render('{{ json .M }} {{ json .L }} {{ json "<&>" }} {{ json .Nil }}')
        == '{"a":1,"b":2} ["a","b","c"] "\\u003c\\u0026\\u003e" null'
    )
    assert render_go_template("{{ shout .Name }}", DATA, funcs={"shout": str.upper}) == "ANN"


# ---------------------------------------------------------------------------------------------------------------
# Errors say where
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "message", "line", "column"),
    [
        ("ok\n  {{ .Prompt ", "unclosed action", 2, 3),
        ("{{ .X }}{{ foo .X }}", 'function "foo" not defined', 1, 12),
        ("text\n{{ end }}", "unexpected {{end}}", 2, 1),
        ("{{ else }}", "unexpected {{else}}", 1, 1),
        ("{{ if .A }}\nnever closed", "the {{if}} at line 1, column 1 has no {{end}}", 2, 13),
        ("{{ range .L }}{{ else }}{{ break }}{{ end }}", "{{break}} outside {{range}}", 1, 25),
        ("{{ $x }}", 'undefined variable "$x"', 1, 4),
        ("{{ .Name }", 'unexpected "}" in operand', 1, 10),
        ('{{ "abc }}', "unterminated quoted string", 1, 4),
        ("{{/* no end", "unclosed comment", 1, 1),
        ("{{ if }}{{ end }}", "missing value for if", 1, 7),
        ('{{ "a" | 1 }}', "non executable command in pipeline stage 2", 1, 10),
    ],
)
def test_parse_errors_say_where(template: str, message: str, line: int, column: int) -> None:
    with pytest.raises(TemplateError) as info:
        render(template)
    assert message in str(info.value)
    assert (info.value.line, info.value.column) == (line, column)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("template", "message", "context"),
    [
        ("{{ len .L .L }}", "wrong number of args for len: want 1 got 2", "len .L .L"),
        ("{{ .L | not 1 }}", "wrong number of args for not: want 1 got 2", "not 1"),
        ("{{ printf }}", "wrong number of args for printf: want at least 1 got 0", "printf"),
        ("{{ .Missing.X }}", "nil pointer evaluating interface {}.X", ".Missing.X"),
        ("{{ .Name.X }}", "can't evaluate field X in type string", ".Name.X"),
        ("{{ .Name 1 }}", "Name is not a method but has arguments", ".Name"),
        ("{{ range .F }}{{ end }}", "range can't iterate over 1.5", ".F"),
        ("{{ nil }}", "nil is not a command", "nil"),
        ('{{ template "nope" }}', 'template "nope" not defined', '{{template "nope"}}'),
        ("{{ printf .N }}", "wrong type for value; expected string; got int", ".N"),
    ],
)
def test_execution_errors_name_the_action(template: str, message: str, context: str) -> None:
    with pytest.raises(TemplateError) as info:
        render("\n" + template)
    assert message in str(info.value)
    assert info.value.context == context
    assert info.value.line == 2
    assert f"line 2, column {info.value.column}: at <{context}>: {message}" in str(info.value)


# ---------------------------------------------------------------------------------------------------------------
# template_variables
# ---------------------------------------------------------------------------------------------------------------


def test_template_variables() -> None:
    assert template_variables("{{ if .System }}{{ .System }}{{ end }}{{ .Prompt }} {{ .Response }}") == {
        "System",
        "Prompt",
        "Response",
    }
    assert template_variables(GEMMA3_INSTRUCT) == {"Messages", "System"}  # .Role/.Content are message fields
    assert template_variables(QWEN25) == {"Suffix", "Prompt", "Messages", "System", "Tools", "Response"}
    assert template_variables("{{ with .Tools }}{{ . }}{{ .Name }}{{ else }}{{ .Other }}{{ end }}") == {
        "Tools",
        "Other",
    }
    assert template_variables("plain text") == set()
    with pytest.raises(TemplateError, match="unclosed action"):
        template_variables("{{ .Prompt ")


# ---------------------------------------------------------------------------------------------------------------
# Ollama's own templates and expected prompts (template/testdata)
# ---------------------------------------------------------------------------------------------------------------

# template/llama3-instruct.gotmpl
LLAMA3_INSTRUCT = (
    "{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n"
    "\n"
    "{{ .Content }}<|eot_id|>\n"
    "{{- end }}<|start_header_id|>assistant<|end_header_id|>\n"
    "\n"
)

# template/chatml.gotmpl
CHATML = "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"

# template/gemma-instruct.gotmpl
GEMMA_INSTRUCT = (
    '{{- $system := "" }}\n'
    "{{- range .Messages }}\n"
    '{{- if eq .Role "system" }}\n'
    "{{- if not $system }}{{ $system = .Content }}\n"
    '{{- else }}{{ $system = printf "%s\\n\\n%s" $system .Content }}\n'
    "{{- end }}\n"
    "{{- continue }}\n"
    '{{- else if eq .Role "user" }}<start_of_turn>user\n'
    "{{- if $system }}\n"
    "{{ $system }}\n"
    '{{- $system = "" }}\n'
    "{{- end }}\n"
    '{{- else if eq .Role "assistant" }}<start_of_turn>model\n'
    "{{- end }}\n"
    "{{ .Content }}<end_of_turn>\n"
    "{{ end }}<start_of_turn>model\n"
)

# template/gemma3-instruct.gotmpl
GEMMA3_INSTRUCT = (
    "{{- range $i, $_ := .Messages }}\n"
    "{{- $last := eq (len (slice $.Messages $i)) 1 }}\n"
    '{{- if eq .Role "user" }}<start_of_turn>user\n'
    "{{- if and (eq $i 1) $.System }}\n"
    "{{ $.System }}\n"
    "{{ end }}\n"
    "{{ .Content }}<end_of_turn>\n"
    '{{ else if eq .Role "assistant" }}<start_of_turn>model\n'
    "{{ .Content }}<end_of_turn>\n"
    "{{ end }}\n"
    "{{- if $last }}<start_of_turn>model\n"
    "{{ end }}\n"
    "{{- end }}\n"
)

# template/mistral-instruct.gotmpl
MISTRAL_INSTRUCT = (
    "[INST] {{ range $index, $_ := .Messages }}\n"
    '{{- if eq .Role "system" }}{{ .Content }}\n'
    "\n"
    '{{ else if eq .Role "user" }}{{ .Content }}[/INST]\n'
    '{{- else if eq .Role "assistant" }} {{ .Content }}</s>[INST] {{ end }}\n'
    "{{- end }}"
)

# template/phi-3.gotmpl
PHI_3 = "{{- range .Messages }}<|{{ .Role }}|>\n{{ .Content }}<|end|>\n{{ end }}<|assistant|>\n"

# template/testdata/<name>.gotmpl/<conversation>
EXPECTED = {
    ("LLAMA3_INSTRUCT", "user"): (
        "<|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Hello, how are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
    ),
    ("LLAMA3_INSTRUCT", "user-assistant-user"): (
        "<|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Hello, how are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "I'm doing great. How can I help you today?<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "I'd like to show off how chat templating "
        "works!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
    ),
    ("LLAMA3_INSTRUCT", "system-user-assistant-user"): (
        "<|start_header_id|>system<|end_header_id|>\n"
        "\n"
        "You are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Hello, how are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "I'm doing great. How can I help you today?<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "I'd like to show off how chat templating "
        "works!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
    ),
    ("CHATML", "user"): ("<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\n"),
    ("CHATML", "user-assistant-user"): (
        "<|im_start|>user\n"
        "Hello, how are you?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "I'm doing great. How can I help you today?<|im_end|>\n"
        "<|im_start|>user\n"
        "I'd like to show off how chat templating works!<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
    ("CHATML", "system-user-assistant-user"): (
        "<|im_start|>system\n"
        "You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n"
        "Hello, how are you?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "I'm doing great. How can I help you today?<|im_end|>\n"
        "<|im_start|>user\n"
        "I'd like to show off how chat templating works!<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
    ("GEMMA_INSTRUCT", "user"): ("<start_of_turn>user\nHello, how are you?<end_of_turn>\n<start_of_turn>model\n"),
    ("GEMMA_INSTRUCT", "user-assistant-user"): (
        "<start_of_turn>user\n"
        "Hello, how are you?<end_of_turn>\n"
        "<start_of_turn>model\n"
        "I'm doing great. How can I help you today?<end_of_turn>\n"
        "<start_of_turn>user\n"
        "I'd like to show off how chat templating works!<end_of_turn>\n"
        "<start_of_turn>model\n"
    ),
    ("GEMMA_INSTRUCT", "system-user-assistant-user"): (
        "<start_of_turn>user\n"
        "You are a helpful assistant.\n"
        "Hello, how are you?<end_of_turn>\n"
        "<start_of_turn>model\n"
        "I'm doing great. How can I help you today?<end_of_turn>\n"
        "<start_of_turn>user\n"
        "I'd like to show off how chat templating works!<end_of_turn>\n"
        "<start_of_turn>model\n"
    ),
    ("GEMMA3_INSTRUCT", "user"): ("<start_of_turn>user\nHello, how are you?<end_of_turn>\n<start_of_turn>model\n\n"),
    ("GEMMA3_INSTRUCT", "user-assistant-user"): (
        "<start_of_turn>user\n"
        "Hello, how are you?<end_of_turn>\n"
        "<start_of_turn>model\n"
        "I'm doing great. How can I help you today?<end_of_turn>\n"
        "<start_of_turn>user\n"
        "I'd like to show off how chat templating works!<end_of_turn>\n"
        "<start_of_turn>model\n"
        "\n"
    ),
    ("GEMMA3_INSTRUCT", "system-user-assistant-user"): (
        "<start_of_turn>user\n"
        "You are a helpful assistant.\n"
        "\n"
        "Hello, how are you?<end_of_turn>\n"
        "<start_of_turn>model\n"
        "I'm doing great. How can I help you today?<end_of_turn>\n"
        "<start_of_turn>user\n"
        "I'd like to show off how chat templating works!<end_of_turn>\n"
        "<start_of_turn>model\n"
        "\n"
    ),
    ("MISTRAL_INSTRUCT", "user"): "[INST] Hello, how are you?[/INST]",
    ("MISTRAL_INSTRUCT", "user-assistant-user"): (
        "[INST] Hello, how are you?[/INST] I'm doing great. How can I help you today?</s>[INST] I'd like "
        "to show off how chat templating works![/INST]"
    ),
    ("MISTRAL_INSTRUCT", "system-user-assistant-user"): (
        "[INST] You are a helpful assistant.\n"
        "\n"
        "Hello, how are you?[/INST] I'm doing great. How can I help you today?</s>[INST] I'd like to "
        "show off how chat templating works![/INST]"
    ),
    ("PHI_3", "user"): ("<|user|>\nHello, how are you?<|end|>\n<|assistant|>\n"),
    ("PHI_3", "user-assistant-user"): (
        "<|user|>\n"
        "Hello, how are you?<|end|>\n"
        "<|assistant|>\n"
        "I'm doing great. How can I help you today?<|end|>\n"
        "<|user|>\n"
        "I'd like to show off how chat templating works!<|end|>\n"
        "<|assistant|>\n"
    ),
    ("PHI_3", "system-user-assistant-user"): (
        "<|system|>\n"
        "You are a helpful assistant.<|end|>\n"
        "<|user|>\n"
        "Hello, how are you?<|end|>\n"
        "<|assistant|>\n"
        "I'm doing great. How can I help you today?<|end|>\n"
        "<|user|>\n"
        "I'd like to show off how chat templating works!<|end|>\n"
        "<|assistant|>\n"
    ),
}

# tools/testdata/qwen2.5.gotmpl and qwen2.5.out (Ollama's repository until mid-2025)
QWEN25 = (
    "{{- if .Suffix }}<|fim_prefix|>{{ .Prompt }}<|fim_suffix|>{{ .Suffix }}<|fim_middle|>\n"
    "{{- else if .Messages }}\n"
    "{{- if or .System .Tools }}<|im_start|>system\n"
    "{{- if .System }}\n"
    "{{ .System }}\n"
    "{{- end }}\n"
    "{{- if .Tools }}\n"
    "\n"
    "# Tools\n"
    "\n"
    "You may call one or more functions to assist with the user query.\n"
    "\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
    "{{- range .Tools }}\n"
    '{"type": "function", "function": {{ .Function }}}\n'
    "{{- end }}\n"
    "</tools>\n"
    "\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>\n"
    "{{- end }}<|im_end|>\n"
    "{{ end }}\n"
    "{{- range $i, $_ := .Messages }}\n"
    "{{- $last := eq (len (slice $.Messages $i)) 1 -}}\n"
    '{{- if eq .Role "user" }}<|im_start|>user\n'
    "{{ .Content }}<|im_end|>\n"
    '{{ else if eq .Role "assistant" }}<|im_start|>assistant\n'
    "{{ if .Content }}{{ .Content }}\n"
    "{{- else if .ToolCalls }}<tool_call>\n"
    '{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}\n'
    "{{ end }}</tool_call>\n"
    "{{- end }}{{ if not $last }}<|im_end|>\n"
    "{{ end }}\n"
    '{{- else if eq .Role "tool" }}<|im_start|>user\n'
    "<tool_response>\n"
    "{{ .Content }}\n"
    "</tool_response><|im_end|>\n"
    "{{ end }}\n"
    '{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant\n'
    "{{ end }}\n"
    "{{- end }}\n"
    "{{- else }}\n"
    "{{- if .System }}<|im_start|>system\n"
    "{{ .System }}<|im_end|>\n"
    "{{ end }}{{ if .Prompt }}<|im_start|>user\n"
    "{{ .Prompt }}<|im_end|>\n"
    "{{ end }}<|im_start|>assistant\n"
    "{{ end }}{{ .Response }}{{ if .Response }}<|im_end|>{{ end }}"
)
QWEN25_EXPECTED = (
    "<|im_start|>system\n"
    "You are a knowledgeable assistant. You can answer questions and perform tasks.\n"
    "\n"
    "# Tools\n"
    "\n"
    "You may call one or more functions to assist with the user query.\n"
    "\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
    '{"type": "function", "function": {"name":"get_current_weather","description":"Get the current '
    'weather","parameters":{"type":"object","required":["location","format"],"properties":{"format":{'
    '"type":"string","description":"The temperature unit to use. Infer this from the user\'s '
    'location.","enum":["celsius","fahrenheit"]},"location":{"type":"string","description":"The city '
    'and state, e.g. San Francisco, CA"}}}}}\n'
    "</tools>\n"
    "\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "What's the weather like today in Paris?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<tool_call>\n"
    '{"name": "get_current_weather", "arguments": {"format":"celsius","location":"Paris, France"}}\n'
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "22\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "The current temperature in Paris, France is 22 degrees Celsius.<|im_end|>\n"
    "<|im_start|>user\n"
    "What's the weather like today in San Francisco and Toronto?<|im_end|>\n"
    "<|im_start|>assistant\n"
)

USER = {"role": "user", "content": "Hello, how are you?"}
ASSISTANT = {"role": "assistant", "content": "I'm doing great. How can I help you today?"}
USER2 = {"role": "user", "content": "I'd like to show off how chat templating works!"}
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
CONVERSATIONS = {
    "user": [USER],
    "user-assistant-user": [USER, ASSISTANT, USER2],
    "system-user-assistant-user": [SYSTEM, USER, ASSISTANT, USER2],
}


@pytest.mark.parametrize(("template", "conversation"), list(EXPECTED))
def test_ollama_templates_render_like_ollama(template: str, conversation: str) -> None:
    assert render_ollama_prompt(globals()[template], CONVERSATIONS[conversation]) == EXPECTED[template, conversation]


def test_system_argument_is_the_modelfile_system() -> None:
    # SYSTEM goes first unless the chat starts with its own system message, as in Ollama's chat handler
    with_system = render_ollama_prompt(CHATML, [USER, ASSISTANT, USER2], system="You are a helpful assistant.")
    assert with_system == EXPECTED["CHATML", "system-user-assistant-user"]
    own = render_ollama_prompt(CHATML, [SYSTEM, USER], system="ignored")
    assert "ignored" not in own and own.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>")


def test_consecutive_messages_are_merged_but_not_tool_results() -> None:
    template = "{{ range .Messages }}[{{ .Role }}:{{ .Content }}]{{ end }}|{{ .System }}"
    messages = [
        {"role": "System", "content": "s1"},
        {"role": "system", "content": "s2"},
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
        {"role": "tool", "content": "t1"},
        {"role": "tool", "content": "t2"},
    ]
    assert render_ollama_prompt(template, messages) == "[system:s1\n\ns2][user:a\n\nb][tool:t1][tool:t2]|s1\n\ns2"


def test_think_values_and_images() -> None:
    template = "{{ .Think }} {{ .ThinkLevel }} {{ .IsThinkSet }}{{ range .Messages }} {{ .Content }}{{ end }}"
    assert render_ollama_prompt(template, [USER]) == "false  false Hello, how are you?"
    assert render_ollama_prompt(template, [USER], think=True).startswith("true medium true")
    assert render_ollama_prompt(template, [USER], think="high").startswith("true high true")
    images = [{"role": "user", "content": "what is this?", "images": ["<b64>"]}]
    assert render_ollama_prompt(template, images).endswith(" [img-0]what is this?")


# Ollama's tools/testdata/qwen2.5.gotmpl, with the conversation and tools of tools/testdata (messages.json,
# tools.json) and the prompt Ollama expected (qwen2.5.out).
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                    "format": {
                        "type": "string",
                        "enum": ["celsius", "fahrenheit"],
                        "description": "The temperature unit to use. Infer this from the user's location.",
                    },
                },
                "required": ["location", "format"],
            },
        },
    }
]
TOOL_CHAT = [
    {"role": "system", "content": "You are a knowledgeable assistant. You can answer questions and perform tasks."},
    {"role": "user", "content": "What's the weather like today in Paris?"},
    {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "89a1e453-0bce-4de3-a456-c54bed09c520",
                "type": "function",
                "function": {
                    "name": "get_current_weather",
                    "arguments": {"location": "Paris, France", "format": "celsius"},
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "89a1e453-0bce-4de3-a456-c54bed09c520", "content": "22"},
    {"role": "assistant", "content": "The current temperature in Paris, France is 22 degrees Celsius."},
    {"role": "user", "content": "What's the weather like today in San Francisco and Toronto?"},
]


def test_qwen25_with_tools_renders_like_ollama() -> None:
    assert render_ollama_prompt(QWEN25, TOOL_CHAT, tools=TOOLS) == QWEN25_EXPECTED


@pytest.mark.parametrize("arguments", ["[" * 100_000, '{"a":' * 100_000, "{oops", '"' + "x" * (17 << 20) + '"'])
def test_tool_arguments_that_are_not_readable_json_render_as_none(arguments: str) -> None:
    calls = "{{ range .Messages }}{{ range .ToolCalls }}{{ .Function.Name }}={{ .Function.Arguments }}{{ end }}"
    calls += "{{ end }}"

    def chat(args: object) -> list[dict]:
        call = {"function": {"name": "f", "arguments": args}}
        return [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [call]}]

    assert render_ollama_prompt(calls, chat('{"city": "Paris"}')) == 'f={"city":"Paris"}'  # a JSON string is parsed
    assert render_ollama_prompt(calls, chat(arguments)) == render_ollama_prompt(calls, chat(None))


def test_tool_values_in_templates() -> None:
    chat = TOOL_CHAT[:3]
    calls = "{{ range .Messages }}{{ range .ToolCalls }}{{ .Function.Name }}{{ .Function.Arguments }}{{ end }}{{ end }}"
    assert render_ollama_prompt(calls, chat) == 'get_current_weather{"format":"celsius","location":"Paris, France"}'
    args = (
        "{{ range .Messages }}{{ range .ToolCalls }}"
        "{{ range $k, $v := .Function.Arguments }}{{ $k }}={{ $v }};{{ end }}"
        "{{ end }}{{ end }}"
    )
    assert render_ollama_prompt(args, chat) == "format=celsius;location=Paris, France;"
    props = (
        "{{ range .Messages }}{{ end }}{{ range .Tools }}"
        "{{ range $name, $p := .Function.Parameters.Properties }}"
        "{{ $name }}:{{ $p.Type }}/{{ toTypeScriptType $p }};"
        "{{ end }}"
        "{{ end }}"
    )
    assert render_ollama_prompt(props, [USER], tools=TOOLS) == "format:string/string;location:string/string;"
    no_tools = "{{ range .Messages }}{{ end }}{{ .Tools }} {{ if .Tools }}yes{{ else }}no{{ end }} {{ len .Tools }}"
    assert render_ollama_prompt(no_tools, [USER]) == "null no 0"
    assert render_ollama_prompt("{{ range .Messages }}{{ end }}{{ json .Tools }}", [USER], tools=TOOLS).startswith(
        '[{"type":"function","function":{"name":"get_current_weather","description":"Get the current weather",'
    )


# ---------------------------------------------------------------------------------------------------------------
# Templates without .Messages: executed once per turn, the last turn cut after {{ .Response }}
# (cases of Ollama's TestExecuteWithMessages)
# ---------------------------------------------------------------------------------------------------------------

HELLO = [
    {"role": "user", "content": "Hello friend!"},
    {"role": "assistant", "content": "Hello human!"},
    {"role": "user", "content": "What is your name?"},
]
MISTRAL_LEGACY = "[INST] {{ if .System }}{{ .System }}\n\n{{ end }}{{ .Prompt }}[/INST] "
MISTRAL_MESSAGES = (
    "[INST] {{ if .System }}{{ .System }}\n\n{{ end }}\n"
    "{{- range .Messages }}\n"
    '{{- if eq .Role "user" }}{{ .Content }}[/INST] {{ else if eq .Role "assistant" }}{{ .Content }}[INST] {{ end }}\n'
    "{{- end }}"
)
CHATML_LEGACY = (
    "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
    "{{ if .Prompt }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n{{ end }}"
    "<|im_start|>assistant\n{{ .Response }}<|im_end|>\n"
)


@pytest.mark.parametrize("template", [MISTRAL_LEGACY, MISTRAL_LEGACY + "{{ .Response }}", MISTRAL_MESSAGES])
def test_mistral_with_and_without_messages(template: str) -> None:
    expected = "[INST] Hello friend![/INST] Hello human![INST] What is your name?[/INST] "
    assert render_ollama_prompt(template, HELLO) == expected
    expected = (
        "[INST] You are a helpful assistant!\n\nHello friend![/INST] Hello human![INST] What is your name?[/INST] "
    )
    assert render_ollama_prompt(template, HELLO, system="You are a helpful assistant!") == expected


def test_legacy_template_continues_a_started_assistant_message() -> None:
    prefill = [*HELLO, {"role": "assistant", "content": "My name is Ollama and I"}]
    expected = "[INST] Hello friend![/INST] Hello human![INST] What is your name?[/INST] My name is Ollama and I"
    assert render_ollama_prompt("[INST] {{ .Prompt }}[/INST] ", prefill) == expected
    assert render_ollama_prompt("[INST] {{ .Prompt }}[/INST] {{ .Response }}", prefill) == expected


def test_legacy_chatml_stops_where_the_model_writes() -> None:
    expected = (
        "<|im_start|>system\nYou are a helpful assistant!<|im_end|>\n<|im_start|>user\nHello friend!<|im_end|>\n"
        "<|im_start|>assistant\nHello human!<|im_end|>\n<|im_start|>user\nWhat is your name?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render_ollama_prompt(CHATML_LEGACY, HELLO, system="You are a helpful assistant!") == expected


def test_legacy_quirks_of_ollama() -> None:
    # the last turn runs without Ollama's own functions, and a cut inside {{if}}…{{else}} makes Ollama fail
    with pytest.raises(TemplateError, match=r'"json" is not a defined function.*built-in functions only'):
        render_ollama_prompt("{{ json .Prompt }} {{ .Response }}", HELLO)
    with pytest.raises(TemplateError, match="Ollama cannot render this template"):
        render_ollama_prompt("{{ if .Prompt }}{{ .Response }}{{ else }}x{{ end }}", HELLO)
    with pytest.raises(TemplateError, match="undefined template specified"):
        render_ollama_prompt('{{ define "x" }}{{ .Prompt }}{{ end }}{{ template "x" }}', HELLO)
