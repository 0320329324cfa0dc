"""How a tool call reads, for the transcript's cards and the exports: its state in words, its arguments, and a
preview of its result (what the view shows is cut much shorter than what the model was sent, with the byte
count of the whole). Plain text only: a tool's output is untrusted and never becomes markup or a link."""

from __future__ import annotations

import json

from app.core.chat.tool_use import Approval, ToolUse

PREVIEW_CHARS = 2_000  # of a result, in the transcript

STATE_TEXT = {
    Approval.PENDING: "Not run",
    Approval.APPROVED: "Approved",
    Approval.ALWAYS: "Allowed always in this chat",
    Approval.DENIED: "Denied",
    Approval.CANCELLED: "Cancelled",
    Approval.UNKNOWN: "Not run",
}


def call_state(call: ToolUse, waiting: bool = False) -> tuple[str, str]:
    """(words, level) for a call: level "" (neutral), "warning" or "error"."""
    if waiting:
        return "Waiting for your approval", "warning"
    if call.approval is Approval.DENIED:
        return ("Denied: " + call.reason) if call.reason else "Denied", "warning"
    if call.approval is Approval.UNKNOWN:
        return "Not run: " + (call.result or "").removeprefix("Error: "), "error"
    if call.approval.runs and not call.settled:
        return "Running…", ""
    if call.approval.runs and call.is_error:
        return f"{STATE_TEXT[call.approval]} · failed", "error"
    if call.approval is Approval.CANCELLED or (call.is_error and call.result and "stopped the reply" in call.result):
        return "Cancelled (Stop)", "warning"
    return STATE_TEXT[call.approval], ""


def arguments_text(call: ToolUse) -> str:
    """The arguments, indented when they are a JSON object; as the model wrote them otherwise."""
    value = call.arguments_object()
    if value is None:
        return call.arguments
    return json.dumps(value, ensure_ascii=False, indent=2) if value else "(no arguments)"


def result_label(call: ToolUse) -> str:
    """The result toggle's words: "Result · 1,234 bytes" (an error, or the denial the model was sent, says so)."""
    what = "Error" if call.is_error else "Sent to the model" if call.approval is Approval.DENIED else "Result"
    return f"{what} · {call.result_bytes:,} bytes"


def result_preview(call: ToolUse, limit: int = PREVIEW_CHARS) -> str:
    """The start of what the model was sent, and a line that says how much more there was."""
    text = call.result or ""
    if len(text) <= limit and len(text.encode("utf-8", "surrogatepass")) >= call.result_bytes:
        return text
    return f"{text[:limit]}\n… shown: the first {min(limit, len(text)):,} characters of {call.result_bytes:,} bytes"


def call_heading(call: ToolUse) -> str:
    """One line for exports: "Tool call: read_file · builtin — Approved"."""
    words, _level = call_state(call)
    return f"Tool call: {call.tool or call.name} · {call.server or 'no such tool'} — {words}"


def sent_note(call: ToolUse) -> str:
    """What the model was sent back, in words with the sizes."""
    sent = len((call.result or "").encode("utf-8", "surrogatepass"))
    if not call.settled:
        return "No result (the call was not run)"
    if sent < call.result_bytes:
        return f"Result: {call.result_bytes:,} bytes; the model was sent the first part ({sent:,} bytes)"
    return f"Result sent to the model ({call.result_bytes:,} bytes)"


def fenced(text: str, info: str = "") -> list[str]:
    """``text`` in a Markdown code fence longer than any run of backticks inside it (so it stays inert)."""
    longest = max((len(run) for run in text.split("\n") for run in _backtick_runs(run)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, text, fence]


def _backtick_runs(line: str) -> list[str]:
    runs, current = [], ""
    for char in line:
        if char == "`":
            current += char
        elif current:
            runs.append(current)
            current = ""
    return [*runs, current] if current else runs
