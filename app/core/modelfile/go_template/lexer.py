"""The lexer (Go: text/template/parse/lex.go)."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.modelfile.go_template.strconv import go_quote

_SPACE = " \t\r\n"
KEYWORDS = frozenset({"block", "break", "continue", "define", "else", "end", "if", "range", "template", "with"})


@dataclass(frozen=True, slots=True)
class Token:
    """``kind`` is "text", "{{", "}}", "space", "ident", "field", "var", "dot", "string", "raw", "char", "number",
    "bool", "nil", "|", "(", ")", ":=", "=", "punct", "eof", "error", or a keyword such as "if"."""

    kind: str
    val: str
    pos: int


class _LexError(Exception):
    def __init__(self, msg: str, pos: int) -> None:
        super().__init__(msg)
        self.msg = msg
        self.pos = pos


def _is_alnum(c: str) -> bool:
    return c == "_" or c.isalpha() or c.isdecimal()


def _go_rune(c: str) -> str:
    return f"U+{ord(c):04X} '{c}'"


class Lexer:
    """Splits a template into tokens. A lexing error becomes the last token, so that the parser reports an earlier
    parse error first, as Go's concurrent lexer does."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.n = len(src)
        self.tokens: list[Token] = []

    def run(self) -> list[Token]:
        try:
            self._lex()
        except _LexError as e:
            self.tokens.append(Token("error", e.msg, e.pos))
        else:
            self.tokens.append(Token("eof", "", self.n))
        return self.tokens

    def _emit(self, kind: str, start: int, end: int) -> None:
        self.tokens.append(Token(kind, self.src[start:end], start))

    def _skip_space(self, p: int) -> int:
        while p < self.n and self.src[p] in _SPACE:
            p += 1
        return p

    def _right_delim_at(self, p: int) -> tuple[bool, bool]:
        """(is there a closing delimiter at p, does it carry a trim marker " -}}")."""
        src = self.src
        if p + 1 < self.n and src[p] in _SPACE and src[p + 1] == "-" and src.startswith("}}", p + 2):
            return True, True
        return src.startswith("}}", p), False

    def _at_terminator(self, p: int) -> bool:
        return p >= self.n or self.src[p] in _SPACE or self.src[p] in ".,|:)(" or self.src.startswith("}}", p)

    def _lex(self) -> None:
        src, pos = self.src, 0
        while True:
            i = src.find("{{", pos)
            if i < 0:
                if pos < self.n:
                    self._emit("text", pos, self.n)
                return
            trim = i + 3 < self.n and src[i + 2] == "-" and src[i + 3] in _SPACE
            end = len(src[pos:i].rstrip(_SPACE)) + pos if trim else i
            if end > pos:
                self._emit("text", pos, end)
            p = i + (4 if trim else 2)
            if src.startswith("/*", p):
                pos = self._comment(i, p)
            else:
                self.tokens.append(Token("{{", "{{", i))
                pos = self._action(i, p)

    def _comment(self, start: int, p: int) -> int:
        end = self.src.find("*/", p + 2)
        if end < 0:
            raise _LexError("unclosed comment", start)
        delim, trim = self._right_delim_at(end + 2)
        if not delim:
            raise _LexError("comment ends before closing delimiter", start)
        p = end + 2 + (4 if trim else 2)
        return self._skip_space(p) if trim else p

    def _action(self, start: int, p: int) -> int:
        src, depth = self.src, 0
        while True:
            delim, trim = self._right_delim_at(p)
            if delim:
                if depth:
                    raise _LexError("unclosed left paren", p)
                self.tokens.append(Token("}}", "}}", p + (2 if trim else 0)))
                p += 4 if trim else 2
                return self._skip_space(p) if trim else p
            if p >= self.n:
                raise _LexError("unclosed action", start)
            c = src[p]
            if c in _SPACE:
                q = self._skip_space(p)
                if self._right_delim_at(q - 1) == (True, True):
                    q -= 1  # that space belongs to the " -}}" that follows
                    if q == p:
                        continue
                self._emit("space", p, q)
                p = q
            elif c in "=|()":
                self._emit(c, p, p + 1)
                depth += {"(": 1, ")": -1}.get(c, 0)
                if depth < 0:
                    raise _LexError("unexpected right paren", p)
                p += 1
            elif c == ":":
                if not src.startswith(":=", p):
                    raise _LexError("expected :=", p)
                self._emit(":=", p, p + 2)
                p += 2
            elif c == '"' or c == "'":
                p = self._quote(p, c)
            elif c == "`":
                end = src.find("`", p + 1)
                if end < 0:
                    raise _LexError("unterminated raw quoted string", p)
                self._emit("raw", p, end + 1)
                p = end + 1
            elif c == "$" or (c == "." and not (p + 1 < self.n and "0" <= src[p + 1] <= "9")):
                p = self._field_or_variable(p, "var" if c == "$" else "field")
            elif c in "+-." or "0" <= c <= "9":
                p = self._number(p)
            elif _is_alnum(c):
                p = self._identifier(p)
            elif c.isascii() and c.isprintable():
                self._emit("punct", p, p + 1)
                p += 1
            else:
                raise _LexError(f"unrecognized character in action: {_go_rune(c)}", p)

    def _quote(self, p: int, quote: str) -> int:
        q = p + 1
        while True:
            if q >= self.n or self.src[q] == "\n":
                what = "quoted string" if quote == '"' else "character constant"
                raise _LexError(f"unterminated {what}", p)
            c = self.src[q]
            if c == "\\":
                if q + 1 >= self.n or self.src[q + 1] == "\n":
                    q = self.n
                    continue
                q += 2
            elif c == quote:
                self._emit("string" if quote == '"' else "char", p, q + 1)
                return q + 1
            else:
                q += 1

    def _field_or_variable(self, p: int, kind: str) -> int:
        q = p + 1
        if self._at_terminator(q):  # a bare "$" or "."
            self._emit("var" if kind == "var" else "dot", p, q)
            return q
        while q < self.n and _is_alnum(self.src[q]):
            q += 1
        if not self._at_terminator(q):
            raise _LexError(f"bad character {_go_rune(self.src[q])}", q)
        self._emit(kind, p, q)
        return q

    def _identifier(self, p: int) -> int:
        q = p
        while q < self.n and _is_alnum(self.src[q]):
            q += 1
        if not self._at_terminator(q):
            raise _LexError(f"bad character {_go_rune(self.src[q])}", q)
        word = self.src[p:q]
        kind = (
            word if word in KEYWORDS else "bool" if word in ("true", "false") else "nil" if word == "nil" else "ident"
        )
        self._emit(kind, p, q)
        return q

    def _number(self, p: int) -> int:
        src, n = self.src, self.n

        def run(q: int, chars: str) -> int:
            while q < n and src[q] in chars:
                q += 1
            return q

        q = p + 1 if src[p] in "+-" else p
        digits = "0123456789_"
        if q < n and src[q] == "0":
            q += 1
            prefix = src[q : q + 1].lower()
            if prefix and prefix in "xob":
                digits = {"x": "0123456789abcdefABCDEF_", "o": "01234567_", "b": "01_"}[prefix]
                q += 1
        q = run(q, digits)
        if q < n and src[q] == ".":
            q = run(q + 1, digits)
        if q < n and src[q] in ("eE" if len(digits) == 11 else "pP" if len(digits) == 23 else ""):  # exponent
            q += 2 if q + 1 < n and src[q + 1] in "+-" else 1
            q = run(q, "0123456789_")
        if q < n and src[q] == "i":
            q += 1
        if q < n and _is_alnum(src[q]):
            raise _LexError(f"bad number syntax: {go_quote(src[p : q + 1])}", p)
        if q < n and src[q] in "+-":  # Go would read a complex constant such as 1+2i here
            raise _LexError(f"bad number syntax: {go_quote(src[p : q + 1])}", p)
        self._emit("number", p, q)
        return q
