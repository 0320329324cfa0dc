"""The executor (Go: text/template/exec.go): walks a parse tree against data and writes the output."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.core.modelfile.go_template.errors import FuncError, TemplateError, line_col
from app.core.modelfile.go_template.funcs import BUILTINS, Func
from app.core.modelfile.go_template.nodes import (
    Action,
    Bool,
    Branch,
    Chain,
    Command,
    Dot,
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
from app.core.modelfile.go_template.values import (
    go_type,
    is_true,
    print_value,
    sorted_items,
    sprint_value,
    struct_fields,
)


class _Missing:
    """No value passed down the pipeline (Go's missingVal)."""


_MISSING: Any = _Missing()
_MAX_DEPTH = 100


class _BreakLoop(Exception):
    pass


class _ContinueLoop(Exception):
    pass


class _Exec:
    def __init__(self, tree: Tree, funcs: Mapping[str, Func], templates: Mapping[str, tuple[Node, ...]]) -> None:
        self.src = tree.src
        self.funcs = funcs
        self.templates = templates
        self.out: list[str] = []
        self.vars: list[list[Any]] = []
        self.node: Node | None = None
        self.depth = 0

    def run(self, body: tuple[Node, ...], data: Any) -> str:
        self.vars = [["$", data]]
        self.walk(data, body)
        return "".join(self.out)

    def fail(self, msg: str) -> TemplateError:
        if self.node is None:
            return TemplateError(msg)
        line, col = line_col(self.src, self.node.pos)
        return TemplateError(msg, line, col, str(self.node))

    # -- statements -----------------------------------------------------------------------------------------

    def walk(self, dot: Any, nodes: Iterable[Node]) -> None:
        for node in nodes:
            self.node = node
            if isinstance(node, Text):
                self.out.append(node.text)
            elif isinstance(node, Action):
                value = self.eval_pipeline(dot, node.pipe)
                if not node.pipe.decl:
                    self.out.append(print_value(value))
            elif isinstance(node, Branch):
                if node.keyword == "range":
                    self.walk_range(dot, node)
                else:
                    self.walk_if_or_with(dot, node)
            elif isinstance(node, LoopControl):
                raise _BreakLoop if node.keyword == "break" else _ContinueLoop
            elif isinstance(node, TemplateCall):
                self.walk_template(dot, node)

    def walk_if_or_with(self, dot: Any, node: Branch) -> None:
        mark = len(self.vars)
        try:
            value = self.eval_pipeline(dot, node.pipe)
            if is_true(value):
                self.walk(value if node.keyword == "with" else dot, node.body)
            elif node.else_body is not None:
                self.walk(dot, node.else_body)
        finally:
            del self.vars[mark:]

    def range_items(self, value: Any, node: Branch) -> list[tuple[Any, Any]]:
        if value is None:
            return []
        if isinstance(value, (list, tuple)):
            return list(enumerate(value))
        if isinstance(value, dict):
            return sorted_items(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if len(node.pipe.decl) > 1:
                raise self.fail(f"can't use {value} to iterate over more than one variable")
            return [(i, i) for i in range(value)]
        raise self.fail(f"range can't iterate over {sprint_value(value)}")

    def walk_range(self, dot: Any, node: Branch) -> None:
        mark = len(self.vars)
        try:
            items = self.range_items(self.eval_pipeline(dot, node.pipe), node)
            body_mark = len(self.vars)
            for index, elem in items:
                if node.pipe.decl:
                    self.vars[-1][1] = elem
                if len(node.pipe.decl) > 1:
                    self.vars[-2][1] = index
                try:
                    self.walk(elem, node.body)
                except _ContinueLoop:
                    pass
                finally:
                    del self.vars[body_mark:]
            if not items and node.else_body is not None:
                self.walk(dot, node.else_body)
        except _BreakLoop:
            pass
        finally:
            del self.vars[mark:]

    def walk_template(self, dot: Any, node: TemplateCall) -> None:
        body = self.templates.get(node.name)
        if body is None:
            raise self.fail(f'template "{node.name}" not defined')
        if self.depth >= _MAX_DEPTH:
            raise self.fail(f"exceeded maximum template depth ({_MAX_DEPTH})")
        new_dot = self.eval_pipeline(dot, node.pipe) if node.pipe is not None else None
        saved = self.vars
        self.vars = [["$", new_dot]]
        self.depth += 1
        try:
            self.walk(new_dot, body)
        finally:
            self.vars = saved
            self.depth -= 1

    # -- expressions ----------------------------------------------------------------------------------------

    def var_value(self, name: str) -> Any:
        for entry in reversed(self.vars):
            if entry[0] == name:
                return entry[1]
        raise self.fail(f"undefined variable: {name}")

    def set_var(self, name: str, value: Any) -> None:
        for entry in reversed(self.vars):
            if entry[0] == name:
                entry[1] = value
                return
        raise self.fail(f"undefined variable: {name}")

    def eval_pipeline(self, dot: Any, pipe: Pipe) -> Any:
        self.node = pipe
        value = _MISSING
        for cmd in pipe.cmds:
            value = self.eval_command(dot, cmd, value)
        for name in pipe.decl:
            if pipe.is_assign:
                self.set_var(name, value)
            else:
                self.vars.append([name, value])
        return value

    def not_a_function(self, args: Sequence[Node], final: Any) -> None:
        if len(args) > 1 or final is not _MISSING:
            raise self.fail(f"can't give argument to non-function {args[0]}")

    def eval_command(self, dot: Any, cmd: Command, final: Any) -> Any:
        first = cmd.args[0]
        self.node = first
        if isinstance(first, Field):
            return self.eval_field_chain(dot, dot, first.idents, cmd.args, final)
        if isinstance(first, Chain):
            return self.eval_chain(dot, first, cmd.args, final)
        if isinstance(first, Identifier):
            return self.eval_function(dot, first, cmd, cmd.args, final)
        if isinstance(first, Variable):
            return self.eval_variable(dot, first, cmd.args, final)
        self.not_a_function(cmd.args, final)
        if isinstance(first, Pipe):
            return self.eval_pipeline(dot, first)
        if isinstance(first, Nil):
            raise self.fail("nil is not a command")
        return self.literal(dot, first)

    def literal(self, dot: Any, node: Node) -> Any:
        if isinstance(node, Bool):
            return node.value
        if isinstance(node, Number):
            return node.value
        if isinstance(node, String):
            return node.value
        if isinstance(node, Dot):
            return dot
        raise self.fail(f"can't evaluate command {node}")

    def eval_chain(self, dot: Any, chain: Chain, args: Sequence[Node], final: Any) -> Any:
        if isinstance(chain.node, Nil):
            raise self.fail(f"indirection through explicit nil in {chain}")
        receiver = self.eval_arg(dot, chain.node, "any")
        self.node = chain
        return self.eval_field_chain(dot, receiver, chain.fields, args, final)

    def eval_variable(self, dot: Any, var: Variable, args: Sequence[Node], final: Any) -> Any:
        value = self.var_value(var.idents[0])
        if len(var.idents) == 1:
            self.not_a_function(args, final)
            return value
        return self.eval_field_chain(dot, value, var.idents[1:], args, final)

    def eval_field_chain(self, dot: Any, receiver: Any, idents: Sequence[str], args: Sequence[Node], final: Any) -> Any:
        # A nil receiver at the start of the chain (nil data, a nil variable) yields no value, as in Go; a nil
        # reached through a field or map lookup cannot be looked into.
        if receiver is None:
            return None
        for name in idents[:-1]:
            receiver = self.eval_field(dot, name, (), _MISSING, receiver)
        return self.eval_field(dot, idents[-1], args, final, receiver)

    def eval_field(self, dot: Any, name: str, args: Sequence[Node], final: Any, receiver: Any) -> Any:
        has_args = len(args) > 1 or final is not _MISSING
        if receiver is None:
            raise self.fail(f"nil pointer evaluating interface {{}}.{name}")
        if isinstance(receiver, dict):
            if has_args:
                raise self.fail(f"{name} is not a method but has arguments")
            return receiver.get(name)
        if isinstance(receiver, (bool, int, float, str, list, tuple)) or name.startswith("_"):
            raise self.fail(f"can't evaluate field {name} in type {go_type(receiver)}")
        fields = struct_fields(receiver)
        if fields is not None and name in dict(fields):
            if has_args:
                raise self.fail(f"{name} has arguments but cannot be invoked as function")
            return getattr(receiver, name)
        attr = getattr(receiver, name, _MISSING) if fields is None else _MISSING
        if attr is _MISSING:
            raise self.fail(f"can't evaluate field {name} in type {go_type(receiver)}")
        if callable(attr):  # a method: called with the arguments
            values = [self.eval_arg(dot, a, "any") for a in args[1:]]
            if final is not _MISSING:
                values.append(final)
            try:
                return attr(*values)
            except Exception as e:
                raise self.fail(f"error calling {name}: {e}") from e
        if has_args:
            raise self.fail(f"{name} has arguments but cannot be invoked as function")
        return attr

    def eval_function(self, dot: Any, node: Identifier, cmd: Node, args: Sequence[Node], final: Any) -> Any:
        """Call a function; ``cmd`` is the whole command, what an error message shows."""
        self.node = cmd
        func = self.funcs.get(node.name)
        if func is None:
            raise self.fail(f'"{node.name}" is not a defined function')
        arg_nodes = args[1:]
        n_in = len(arg_nodes) + (final is not _MISSING)
        n_fixed = len(func.params)
        if func.variadic is not None:
            if n_in < n_fixed:
                raise self.fail(f"wrong number of args for {node.name}: want at least {n_fixed} got {len(arg_nodes)}")
        elif n_in != n_fixed:
            raise self.fail(f"wrong number of args for {node.name}: want {n_fixed} got {n_in}")

        if node.name in ("and", "or") and func is BUILTINS[node.name]:
            value: Any = None
            for a in arg_nodes:  # short-circuit: stop at the first false (and) / true (or) operand
                value = self.eval_arg(dot, a, "any")
                if is_true(value) == (node.name == "or"):
                    return value
            return final if final is not _MISSING else value

        def param_type(i: int) -> str:
            return func.params[i] if i < n_fixed else str(func.variadic)

        values = [self.eval_arg(dot, a, param_type(i)) for i, a in enumerate(arg_nodes)]
        if final is not _MISSING:
            values.append(self.validate(final, param_type(len(arg_nodes))))
        self.node = cmd
        try:
            return func.fn(*values)
        except FuncError as e:
            raise self.fail(f"error calling {node.name}: {e}") from None
        except TemplateError:
            raise
        except Exception as e:
            raise self.fail(f"error calling {node.name}: {e}") from e

    def validate(self, value: Any, typ: str) -> Any:
        if typ == "string":
            if value is None:
                raise self.fail("invalid value; expected string")
            if not isinstance(value, str):
                raise self.fail(f"wrong type for value; expected string; got {go_type(value)}")
        return value

    def eval_arg(self, dot: Any, node: Node, typ: str) -> Any:
        self.node = node
        if isinstance(node, Dot):
            return self.validate(dot, typ)
        if isinstance(node, Nil):
            if typ == "string":
                raise self.fail("cannot assign nil to string")
            return None
        if isinstance(node, Field):
            return self.validate(self.eval_field_chain(dot, dot, node.idents, (node,), _MISSING), typ)
        if isinstance(node, Variable):
            return self.validate(self.eval_variable(dot, node, (), _MISSING), typ)
        if isinstance(node, Pipe):
            return self.validate(self.eval_pipeline(dot, node), typ)
        if isinstance(node, Identifier):
            return self.validate(self.eval_function(dot, node, node, (node,), _MISSING), typ)
        if isinstance(node, Chain):
            return self.validate(self.eval_chain(dot, node, (), _MISSING), typ)
        if typ == "string" and not isinstance(node, String):
            raise self.fail(f"expected string; found {node}")
        return self.literal(dot, node)


def execute(
    tree: Tree,
    data: Any,
    funcs: Mapping[str, Func],
    templates: Mapping[str, tuple[Node, ...]] | None = None,
    body: tuple[Node, ...] | None = None,
) -> str:
    ex = _Exec(tree, funcs, tree.templates if templates is None else templates)
    return ex.run(tree.root if body is None else body, data)
