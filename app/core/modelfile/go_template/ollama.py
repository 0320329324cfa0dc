"""Ollama's Execute (template/template.go): the prompt Ollama builds for a chat request."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.core.modelfile.go_template.errors import TemplateError
from app.core.modelfile.go_template.exec import execute
from app.core.modelfile.go_template.funcs import BUILTINS, all_funcs
from app.core.modelfile.go_template.nodes import (
    Action,
    Branch,
    Command,
    Field,
    Node,
    Pipe,
    TemplateCall,
    Tree,
    Variable,
)
from app.core.modelfile.go_template.ollama_types import convert_tools, template_message
from app.core.modelfile.go_template.parser import parse
from app.core.modelfile.go_template.strconv import clean_output


def _identifiers(node: Node | None) -> list[str]:
    """Ollama's Identifiers: every field and variable name in a node."""
    if isinstance(node, Action):
        return _identifiers(node.pipe)
    if isinstance(node, TemplateCall):
        if node.pipe is None:
            raise TemplateError("undefined template specified")
        return _identifiers(node.pipe)
    if isinstance(node, Branch):
        names = _identifiers(node.pipe)
        for n in (*node.body, *(node.else_body or ())):
            names.extend(_identifiers(n))
        return names
    if isinstance(node, Pipe):
        return [name for cmd in node.cmds for arg in cmd.args for name in _identifiers(arg)]
    if isinstance(node, (Field, Variable)):
        return list(node.idents)
    return []


def _ollama_vars(tree: Tree) -> set[str]:
    """Ollama's Template.Vars: the lower-cased identifiers of the template and of its {{define}}d templates."""
    names: list[str] = []
    for body in (tree.root, *tree.templates.values()):
        for node in body:
            names.extend(_identifiers(node))
    return {n.lower() for n in names}


_RESPONSE_ACTION = Action(0, Pipe(0, (), False, (Command(0, (Field(0, ("Response",)),)),)))


def _cut_after_response(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
    """Ollama's deleteNode: keep the template up to its first {{ .Response }} field and drop what follows, so that
    the last turn ends where the model starts writing."""
    cut = False

    def deleted(n: Node) -> bool:
        nonlocal cut
        if isinstance(n, Field) and "Response" in n.idents:
            cut = True
            return False
        return cut

    def walk_list(items: Iterable[Node]) -> tuple[Node, ...]:
        return tuple(r for r in (walk(c) for c in items) if r is not None)

    def walk_pipe(p: Pipe) -> Pipe | None:
        cmds = []
        for c in p.cmds:
            args = walk_list(c.args)
            if not args:
                return None
            cmds.append(dataclasses.replace(c, args=args))
        return dataclasses.replace(p, cmds=tuple(cmds))

    def walk(n: Node) -> Node | None:
        if deleted(n):
            return None
        if isinstance(n, Branch):
            body = walk_list(n.body)
            else_body = n.else_body
            if else_body is not None:
                if cut:  # Ollama's deleteNode panics here (nil ElseList)
                    raise TemplateError(
                        "Ollama cannot render this template for a chat: it has no .Messages and uses .Response "
                        f"inside an {{{{{n.keyword}}}}} that has an {{{{else}}}}"
                    )
                else_body = walk_list(else_body)
            return dataclasses.replace(n, body=body, else_body=else_body)
        if isinstance(n, Action):
            pipe = walk_pipe(n.pipe)
            return None if pipe is None else dataclasses.replace(n, pipe=pipe)
        if isinstance(n, Pipe):
            return walk_pipe(n)
        return n

    return walk_list(nodes)


def _collate(messages: Sequence[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Ollama's collate: join the system messages, merge consecutive messages of one role (except tool)."""
    system: list[str] = []
    collated: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "system":
            system.append(m["content"])
        if collated and collated[-1]["role"] == m["role"] and m["role"] != "tool":
            collated[-1] = {**collated[-1], "content": collated[-1]["content"] + "\n\n" + m["content"]}
        else:
            collated.append(dict(m))
    return "\n\n".join(system), collated


def _chat_messages(messages: Sequence[Mapping[str, Any]], system: str | None) -> list[dict[str, Any]]:
    """The request's messages as Ollama's server passes them to the template: roles lower-cased, the Modelfile's
    SYSTEM first unless the chat starts with its own system message, image tags in front of the text."""
    msgs = [dict(m) for m in messages]
    for m in msgs:
        m["role"] = str(m.get("role") or "").lower()
        m["content"] = str(m.get("content") or "")
    if system and (not msgs or msgs[0]["role"] != "system"):
        msgs.insert(0, {"role": "system", "content": system})
    image_id = 0
    for m in msgs:
        prefix, content = "", m["content"]
        for _ in m.get("images") or ():
            tag = f"[img-{image_id}]"
            image_id += 1
            if "[img]" in content:
                content = content.replace("[img]", tag, 1)
            else:
                prefix += tag
        m["content"] = prefix + content
    return msgs


def render_ollama_prompt(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    system: str | None = None,
    tools: Sequence[Any] | None = None,
    *,
    think: bool | str | None = None,
    today: _dt.date | None = None,
) -> str:
    """The prompt Ollama would build for a chat request, following template.go's Execute (with or without
    .Messages), for a preview. The generation prompt ends where the model starts writing.

    ``messages`` are chat messages as in Ollama's API: ``role``, ``content`` and optionally ``thinking``,
    ``images``, ``tool_calls`` (``[{"function": {"name": …, "arguments": {…}}}]``), ``tool_name``.
    ``system`` is the Modelfile's SYSTEM, put first unless the chat starts with a system message. ``tools`` are
    tool definitions as in the API (``{"type": "function", "function": {"name", "description", "parameters"}}``).
    ``think`` is the request's ``think`` (True/False or "low"/"medium"/"high"); None leaves it unset.
    """
    funcs = all_funcs(today)
    tree = parse(template, funcs)
    variables = _ollama_vars(tree)
    if "messages" not in variables and "response" not in variables:
        tree.root = (*tree.root, _RESPONSE_ACTION)  # Ollama appends {{ .Response }} to such templates

    level = think if isinstance(think, str) else "medium" if think else ""
    think_values = {
        "Think": bool(think) if not isinstance(think, str) else think in ("high", "medium", "low", "max"),
        "ThinkLevel": level,
        "IsThinkSet": think is not None,
    }
    system_text, collated = _collate(_chat_messages(messages, system))

    if "messages" in variables:
        data = {
            "System": system_text,
            "Messages": [template_message(m) for m in collated],
            "Tools": convert_tools(tools),
            "Response": "",
            **think_values,
        }
        return clean_output(execute(tree, data, funcs))

    # A template without .Messages is executed once per turn (system, prompt, response) and the last turn is cut
    # right after {{ .Response }}.
    out: list[str] = []
    turn = {"System": "", "Prompt": "", "Response": ""}

    def execute_turn() -> None:
        out.append(execute(tree, {**turn, **think_values}, funcs))
        turn.update(System="", Prompt="", Response="")

    for m in collated:
        if m["role"] == "system":
            if turn["Prompt"] or turn["Response"]:
                execute_turn()
            turn["System"] = m["content"]
        elif m["role"] == "user":
            if turn["Response"]:
                execute_turn()
            turn["Prompt"] = m["content"]
        elif m["role"] == "assistant":
            turn["Response"] = m["content"]

    # Ollama runs the cut tree as a fresh template: Go's built-in functions only, no {{define}}d templates.
    last = _cut_after_response(tree.root)
    try:
        out.append(execute(tree, {**turn, **think_values}, BUILTINS, templates={}, body=last))
    except TemplateError as e:
        if "not defined" not in e.message and "not a defined function" not in e.message:
            raise
        note = " (Ollama renders the last turn of a template without .Messages with Go's built-in functions only)"
        raise TemplateError(e.message + note, e.line, e.column, e.context) from None
    return clean_output("".join(out))
