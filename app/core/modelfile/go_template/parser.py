"""The parser (Go: text/template/parse/parse.go)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from app.core.modelfile.go_template.errors import TemplateError, line_col
from app.core.modelfile.go_template.lexer import KEYWORDS, Lexer, Token
from app.core.modelfile.go_template.nodes import (
    Action,
    Bool,
    Branch,
    Chain,
    Command,
    Dot,
    Else,
    End,
    Field,
    Identifier,
    LoopControl,
    Nil,
    Node,
    Number,
    Pipe,
    String,
    TemplateCall,
    Text,
    Tree,
    Variable,
)
from app.core.modelfile.go_template.strconv import go_quote, go_unquote

_OPERAND_START = frozenset({"bool", "char", "dot", "field", "ident", "number", "nil", "raw", "string", "var", "("})


def _parse_number(text: str) -> int | float:
    """The value of a number literal where the type is not known: Go's idealConstant."""
    if text.startswith("'"):
        return ord(go_unquote(text))
    body = text.lstrip("+-")
    negative = text.startswith("-")
    if body.endswith("i"):
        raise ValueError("complex numbers are not supported")
    is_hex = body[:2].lower() == "0x"
    try:
        if is_hex and not any(c in body for c in ".pP"):
            value: int | float = int(body, 16)
        elif body[:2].lower() in ("0o", "0b"):
            value = int(body, 0)
        elif any(c in body for c in ".eEpP"):
            value = float.fromhex(body) if is_hex else float(body.replace("_", ""))
        elif len(body) > 1 and body[0] == "0":
            value = int(body, 8)
        else:
            value = int(body, 10)
    except ValueError:
        raise ValueError(f"illegal number syntax: {go_quote(text)}") from None
    if isinstance(value, float) and math.isinf(value):
        raise ValueError(f"illegal number syntax: {go_quote(text)}")
    if isinstance(value, int) and not -(2**63) <= (-value if negative else value) < 2**63:
        raise ValueError(f"integer overflow: {go_quote(text)}")
    return -value if negative else value


def _token_str(tok: Token) -> str:
    if tok.kind == "eof":
        return "EOF"
    if tok.kind in KEYWORDS:
        return f"<{tok.val}>"
    if len(tok.val) > 10:
        return '"' + tok.val[:10] + '"...'
    return '"' + tok.val + '"'


class _Parser:
    def __init__(self, src: str, funcs: Iterable[str]) -> None:
        self.src = src
        self.funcs = frozenset(funcs)
        self.tokens = Lexer(src).run()
        self.i = 0
        self.vars = ["$"]
        self.range_depth = 0
        self.open_blocks: list[tuple[str, int]] = []
        self.templates: dict[str, tuple[Node, ...]] = {}

    # -- token stream ---------------------------------------------------------------------------------------

    def fail(self, msg: str, pos: int) -> TemplateError:
        line, col = line_col(self.src, pos)
        return TemplateError(msg, line, col)

    def next(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind == "error":
            raise self.fail(tok.val, tok.pos)
        if tok.kind != "eof":
            self.i += 1
        return tok

    def peek(self) -> Token:
        tok = self.next()
        self.i -= tok.kind != "eof"
        return tok

    def backup(self) -> None:
        self.i -= 1

    def next_non_space(self) -> Token:
        tok = self.next()
        while tok.kind == "space":
            tok = self.next()
        return tok

    def peek_non_space(self) -> Token:
        tok = self.next_non_space()
        self.i -= tok.kind != "eof"
        return tok

    def unexpected(self, tok: Token, context: str) -> TemplateError:
        return self.fail(f"unexpected {_token_str(tok)} in {context}", tok.pos)

    def expect(self, kind: str, context: str) -> Token:
        tok = self.next_non_space()
        if tok.kind != kind:
            raise self.unexpected(tok, context)
        return tok

    # -- structure ------------------------------------------------------------------------------------------

    def parse(self) -> Tree:
        root: list[Node] = []
        while self.peek().kind != "eof":
            if self.peek().kind == "{{":
                save = self.i
                self.next()
                if self.next_non_space().kind == "define":
                    self.parse_definition()
                    continue
                self.i = save
            node = self.text_or_action()
            if isinstance(node, (End, Else)):
                raise self.fail(f"unexpected {node}", node.pos)
            root.append(node)
        return Tree(self.src, tuple(root), self.templates)

    def add_template(self, name: str, body: tuple[Node, ...], pos: int) -> None:
        def is_empty(nodes: tuple[Node, ...]) -> bool:
            return all(isinstance(n, Text) and not n.text.strip() for n in nodes)

        old = self.templates.get(name)
        if old is None or is_empty(old):
            self.templates[name] = body
        elif not is_empty(body):  # an empty redefinition is ignored
            raise self.fail(f"template: multiple definition of template {go_quote(name)}", pos)

    def sub_template(self, context: str, pos: int) -> tuple[Node, ...]:
        saved = self.vars, self.range_depth
        self.vars, self.range_depth = ["$"], 0
        self.open_blocks.append((context.split()[0], pos))
        body, end = self.item_list()
        self.open_blocks.pop()
        if not isinstance(end, End):
            raise self.fail(f"unexpected {end} in {context}", end.pos)
        self.vars, self.range_depth = saved
        return body

    def parse_definition(self) -> None:
        tok = self.next_non_space()
        name = self.template_name(tok, "define clause")
        self.expect("}}", "define clause")
        self.add_template(name, self.sub_template("define clause", tok.pos), tok.pos)

    def item_list(self) -> tuple[tuple[Node, ...], Node]:
        nodes: list[Node] = []
        while self.peek_non_space().kind != "eof":
            node = self.text_or_action()
            if isinstance(node, (End, Else)):
                return tuple(nodes), node
            nodes.append(node)
        msg = "unexpected EOF"
        if self.open_blocks:
            keyword, pos = self.open_blocks[-1]
            line, col = line_col(self.src, pos)
            msg += f": the {{{{{keyword}}}}} at line {line}, column {col} has no {{{{end}}}}"
        raise self.fail(msg, len(self.src))

    def text_or_action(self) -> Node:
        tok = self.next_non_space()
        if tok.kind == "text":
            return Text(tok.pos, tok.val)
        if tok.kind == "{{":
            return self.action(tok.pos)
        raise self.unexpected(tok, "input")

    def action(self, start: int) -> Node:
        tok = self.next_non_space()
        kind = tok.kind
        if kind in ("if", "range", "with"):
            pipe, body, else_body = self.parse_control(kind, start)
            return Branch(start, kind, pipe, body, else_body)
        if kind == "end":
            self.expect("}}", "end")
            return End(start)
        if kind == "else":
            if self.peek_non_space().kind in ("if", "with"):  # "else if" / "else with": the keyword stays pending
                return Else(start)
            self.expect("}}", "else")
            return Else(start)
        if kind in ("break", "continue"):
            after = self.next_non_space()
            if after.kind != "}}":
                raise self.unexpected(after, "{{" + kind + "}}")
            if self.range_depth == 0:
                raise self.fail(f"{{{{{kind}}}}} outside {{{{range}}}}", start)
            return LoopControl(start, kind)
        if kind == "template":
            name_tok = self.next_non_space()
            name = self.template_name(name_tok, "template clause")
            call_pipe = None
            if self.next_non_space().kind != "}}":
                self.backup()
                call_pipe = self.pipeline("template clause", "}}")
            return TemplateCall(start, name, call_pipe)
        if kind == "block":
            name_tok = self.next_non_space()
            name = self.template_name(name_tok, "block clause")
            block_pipe = self.pipeline("block clause", "}}")
            self.add_template(name, self.sub_template("block clause", start), start)
            return TemplateCall(start, name, block_pipe)
        self.backup()
        return Action(start, self.pipeline("command", "}}"))

    def template_name(self, tok: Token, context: str) -> str:
        if tok.kind not in ("string", "raw"):
            raise self.unexpected(tok, context)
        return self.unquote(tok)

    def unquote(self, tok: Token) -> str:
        try:
            return go_unquote(tok.val)
        except ValueError as e:
            raise self.fail(f"{e}: {tok.val}", tok.pos) from None

    def parse_control(self, context: str, start: int) -> tuple[Pipe, tuple[Node, ...], tuple[Node, ...] | None]:
        n_vars = len(self.vars)
        self.open_blocks.append((context, start))
        try:
            pipe = self.pipeline(context, "}}")
            self.range_depth += context == "range"
            body, nxt = self.item_list()
            self.range_depth -= context == "range"
            else_body: tuple[Node, ...] | None = None
            if isinstance(nxt, Else):
                if context in ("if", "with") and self.peek().kind == context:
                    # {{if a}}…{{else if b}}…{{end}} is {{if a}}…{{else}}{{if b}}…{{end}}{{end}}
                    tok = self.next()
                    else_pipe, else_list, else_else = self.parse_control(context, tok.pos)
                    else_body = (Branch(tok.pos, context, else_pipe, else_list, else_else),)
                else:
                    else_body, end = self.item_list()
                    if not isinstance(end, End):
                        raise self.fail(f"expected end; found {end}", end.pos)
            return pipe, body, else_body
        finally:
            self.open_blocks.pop()
            del self.vars[n_vars:]

    # -- pipelines ------------------------------------------------------------------------------------------

    def pipeline(self, context: str, end: str) -> Pipe:
        start = self.peek_non_space().pos
        decl: list[str] = []
        is_assign = False
        while self.peek_non_space().kind == "var":
            save = self.i
            var = self.next()
            nxt = self.peek_non_space()
            if nxt.kind in (":=", "="):
                is_assign = nxt.kind == "="
                self.next_non_space()
                decl.append(var.val)
                self.vars.append(var.val)
            elif nxt.kind == "punct" and nxt.val == ",":
                self.next_non_space()
                decl.append(var.val)
                self.vars.append(var.val)
                if context == "range" and len(decl) < 2:
                    if self.peek_non_space().kind in ("var", "}}", ")"):
                        continue
                    raise self.fail("range can only initialize variables", nxt.pos)
                raise self.fail(f"too many declarations in {context}", nxt.pos)
            else:
                self.i = save  # "$x" is an operand, not a declaration
            break
        cmds: list[Command] = []
        while True:
            tok = self.next_non_space()
            if tok.kind == end:
                if not cmds:
                    raise self.fail(f"missing value for {context}", tok.pos)
                for stage, cmd in enumerate(cmds[1:], start=2):
                    if isinstance(cmd.args[0], (Bool, Dot, Nil, Number, String)):
                        raise self.fail(f"non executable command in pipeline stage {stage}", cmd.pos)
                return Pipe(start, tuple(decl), is_assign, tuple(cmds))
            if tok.kind not in _OPERAND_START:
                raise self.unexpected(tok, context)
            self.backup()
            cmds.append(self.command())

    def command(self) -> Command:
        start = self.peek_non_space().pos
        args: list[Node] = []
        while True:
            self.peek_non_space()
            operand = self.operand()
            if operand is not None:
                args.append(operand)
            tok = self.next()
            if tok.kind == "space":
                continue
            if tok.kind in ("}}", ")"):
                self.backup()
            elif tok.kind != "|":
                raise self.unexpected(tok, "operand")
            break
        if not args:
            raise self.fail("empty command", start)
        return Command(start, tuple(args))

    def operand(self) -> Node | None:
        node = self.term()
        if node is None or self.peek().kind != "field":
            return node
        fields: list[str] = []
        while self.peek().kind == "field":
            fields.append(self.next().val[1:])
        if isinstance(node, Field):
            return Field(node.pos, node.idents + tuple(fields))
        if isinstance(node, Variable):
            return Variable(node.pos, node.idents + tuple(fields))
        if isinstance(node, (Bool, String, Number, Nil, Dot)):
            raise self.fail(f"unexpected . after term {go_quote(str(node))}", node.pos)
        return Chain(node.pos, node, tuple(fields))

    def term(self) -> Node | None:
        tok = self.next_non_space()
        kind, pos = tok.kind, tok.pos
        if kind == "ident":
            if tok.val not in self.funcs:
                raise self.fail(f'function "{tok.val}" not defined', pos)
            return Identifier(pos, tok.val)
        if kind == "dot":
            return Dot(pos)
        if kind == "nil":
            return Nil(pos)
        if kind == "var":
            if tok.val not in self.vars:
                raise self.fail(f'undefined variable "{tok.val}"', pos)
            return Variable(pos, (tok.val,))
        if kind == "field":
            return Field(pos, (tok.val[1:],))
        if kind == "bool":
            return Bool(pos, tok.val == "true")
        if kind in ("number", "char"):
            try:
                return Number(pos, tok.val, _parse_number(tok.val))
            except ValueError as e:
                raise self.fail(str(e), pos) from None
        if kind == "(":
            return self.pipeline("parenthesized pipeline", ")")
        if kind in ("string", "raw"):
            return String(pos, tok.val, self.unquote(tok))
        self.backup()
        return None


def parse(src: str, funcs: Iterable[str]) -> Tree:
    return _Parser(src, funcs).parse()
