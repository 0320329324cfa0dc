"""The parse tree (Go: text/template/parse/node.go). ``str(node)`` is how Go shows a node in error messages."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.core.modelfile.go_template.strconv import go_quote


@dataclass(frozen=True)
class Node:
    pos: int


@dataclass(frozen=True)
class Text(Node):
    text: str


@dataclass(frozen=True)
class Identifier(Node):  # a function name
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Field(Node):  # .A.B
    idents: tuple[str, ...]

    def __str__(self) -> str:
        return "." + ".".join(self.idents)


@dataclass(frozen=True)
class Variable(Node):  # $x.A.B (idents[0] is "$x")
    idents: tuple[str, ...]

    def __str__(self) -> str:
        return ".".join(self.idents)


@dataclass(frozen=True)
class Dot(Node):
    def __str__(self) -> str:
        return "."


@dataclass(frozen=True)
class Nil(Node):
    def __str__(self) -> str:
        return "nil"


@dataclass(frozen=True)
class Bool(Node):
    value: bool

    def __str__(self) -> str:
        return "true" if self.value else "false"


@dataclass(frozen=True)
class Number(Node):
    text: str
    value: int | float

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class String(Node):
    quoted: str
    value: str

    def __str__(self) -> str:
        return self.quoted


@dataclass(frozen=True)
class Chain(Node):  # (pipeline).A.B
    node: Node
    fields: tuple[str, ...]

    def __str__(self) -> str:
        base = f"({self.node})" if isinstance(self.node, Pipe) else str(self.node)
        return base + "".join("." + f for f in self.fields)


@dataclass(frozen=True)
class Command(Node):
    args: tuple[Node, ...]

    def __str__(self) -> str:
        return " ".join(f"({a})" if isinstance(a, Pipe) else str(a) for a in self.args)


@dataclass(frozen=True)
class Pipe(Node):
    decl: tuple[str, ...]
    is_assign: bool
    cmds: tuple[Command, ...]

    def __str__(self) -> str:
        decl = ", ".join(self.decl) + (" = " if self.is_assign else " := ") if self.decl else ""
        return decl + " | ".join(str(c) for c in self.cmds)


@dataclass(frozen=True)
class Action(Node):
    pipe: Pipe

    def __str__(self) -> str:
        return "{{" + str(self.pipe) + "}}"


@dataclass(frozen=True)
class Branch(Node):  # if / with / range
    keyword: str
    pipe: Pipe
    body: tuple[Node, ...]
    else_body: tuple[Node, ...] | None

    def __str__(self) -> str:
        return "{{" + self.keyword + " " + str(self.pipe) + "}}"


@dataclass(frozen=True)
class LoopControl(Node):  # break / continue
    keyword: str

    def __str__(self) -> str:
        return "{{" + self.keyword + "}}"


@dataclass(frozen=True)
class TemplateCall(Node):
    name: str
    pipe: Pipe | None

    def __str__(self) -> str:
        return "{{template " + go_quote(self.name) + (f" {self.pipe}" if self.pipe else "") + "}}"


@dataclass(frozen=True)
class End(Node):
    def __str__(self) -> str:
        return "{{end}}"


@dataclass(frozen=True)
class Else(Node):
    def __str__(self) -> str:
        return "{{else}}"


@dataclass
class Tree:
    src: str
    root: tuple[Node, ...]
    templates: dict[str, tuple[Node, ...]] = field(default_factory=dict)
