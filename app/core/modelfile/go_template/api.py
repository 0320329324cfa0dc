"""Rendering any template against data, and listing the top-level fields a template uses."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from app.core.modelfile.go_template.exec import execute
from app.core.modelfile.go_template.funcs import all_funcs
from app.core.modelfile.go_template.nodes import Action, Branch, Chain, Dot, Field, Node, Pipe, TemplateCall, Variable
from app.core.modelfile.go_template.parser import parse
from app.core.modelfile.go_template.strconv import clean_output


def render_go_template(
    template: str,
    data: Any,
    *,
    funcs: Mapping[str, Callable[..., Any]] | None = None,
    today: _dt.date | None = None,
) -> str:
    """Render a Go text/template against ``data`` (usually a dict), with Go's built-in functions and Ollama's
    (``json``, ``currentDate``, ``yesterdayDate``, ``toTypeScriptType``) plus any extra Python ``funcs``.
    Missing map keys read as nil and print ``<no value>``, as with Ollama's ``missingkey=zero``.

    Raises :class:`TemplateError` for a template that does not parse or fails while executing."""
    template_funcs = all_funcs(today, funcs)
    tree = parse(template, template_funcs)
    return clean_output(execute(tree, data, template_funcs))


def template_variables(template: str) -> set[str]:
    """The top-level fields a template uses: ``.X`` where dot is the data, and ``$.X`` anywhere, e.g.
    ``{"System", "Prompt", "Response"}`` or ``{"Messages", "Tools"}``. Raises :class:`TemplateError` when the
    template does not parse."""
    tree = parse(template, all_funcs(None))
    found: set[str] = set()
    visiting: set[str] = set()

    def expr(node: Node | None, dot_is_root: bool) -> None:
        if isinstance(node, Field) and dot_is_root:
            found.add(node.idents[0])
        elif isinstance(node, Variable) and node.idents[0] == "$" and len(node.idents) > 1:
            found.add(node.idents[1])
        elif isinstance(node, Chain):
            expr(node.node, dot_is_root)
        elif isinstance(node, Pipe):
            for cmd in node.cmds:
                for arg in cmd.args:
                    expr(arg, dot_is_root)

    def is_dot(pipe: Pipe | None) -> bool:
        return (
            pipe is not None
            and len(pipe.cmds) == 1
            and len(pipe.cmds[0].args) == 1
            and isinstance(pipe.cmds[0].args[0], Dot)
        )

    def walk(nodes: Iterable[Node], dot_is_root: bool) -> None:
        for node in nodes:
            if isinstance(node, Action):
                expr(node.pipe, dot_is_root)
            elif isinstance(node, Branch):
                expr(node.pipe, dot_is_root)
                keeps_dot = node.keyword == "if" or (node.keyword == "with" and is_dot(node.pipe))
                walk(node.body, dot_is_root and keeps_dot)
                walk(node.else_body or (), dot_is_root)
            elif isinstance(node, TemplateCall):
                expr(node.pipe, dot_is_root)
                body = tree.templates.get(node.name)
                if body is not None and dot_is_root and is_dot(node.pipe) and node.name not in visiting:
                    visiting.add(node.name)
                    walk(body, True)
                    visiting.discard(node.name)

    walk(tree.root, True)
    return found
