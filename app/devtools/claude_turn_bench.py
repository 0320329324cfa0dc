"""``bench serve``'s Claude Code row: one headless Claude Code turn against ``llm-workstation serve``, timed.

Claude Code (found as ``llm-workstation launch claude`` finds it: on PATH, its installer's folder, or npx with the
package in npm's cache) runs ``-p PROMPT --max-turns 1 --output-format stream-json --include-partial-messages``
with the environment ``launch`` gives it, a throwaway HOME and a short output cap, against a ``serve`` child whose
model is loaded with a context that holds Claude Code's prompt (~20k tokens). The model is loaded by a small request
first, so the figures are the turn's own: time to first token from starting the agent to its first text delta, the
whole turn, and from the server's /metrics its requests, prompt tokens and time to first token. The turn runs
twice: the second one can reuse the first one's prompt prefix (what every later turn of a session sees). A turn that
reaches the output cap ends with Claude Code's error, after its first token: its TTFT counts. Without Claude Code
the row says why it was skipped."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CLAUDE_CONTEXT = 32768
CLAUDE_PROMPT = "Reply with one short sentence: what is two plus two?"
CLAUDE_MAX_OUTPUT_TOKENS = 64  # a base model may not stop by itself: past this Claude Code ends the turn with an error
TURN_TIMEOUT_S = 900.0
TURNS = 2


def claude_turns(url: str, model: str, workdir: Path) -> dict[str, Any]:
    """The Claude Code row of ``bench serve`` against the server at ``url`` serving ``model`` (see the module
    docstring): ``{"skipped": why}``, or the turns."""
    from app.services.agents.agents import CLAUDE, locate, not_installed_message

    located = locate(CLAUDE)
    if located is None:
        return {"skipped": not_installed_message(CLAUDE)}
    _load_model(url, model)
    turns = [_turn(located.argv, url, model, workdir) for _ in range(TURNS)]
    return {"agent": located.where, "prompt": CLAUDE_PROMPT, "turns": turns}


def claude_code_missing() -> str | None:
    """Why the row is skipped (Claude Code is not installed, and how to install it), or None."""
    from app.services.agents.agents import CLAUDE, locate, not_installed_message

    return None if locate(CLAUDE) is not None else not_installed_message(CLAUDE)


def _load_model(url: str, model: str) -> None:
    import httpx

    body = {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    httpx.post(url + "/v1/messages", json=body, timeout=600).raise_for_status()


def _turn(agent: tuple[str, ...], url: str, model: str, home: Path) -> dict[str, Any]:
    from app.services.agents.agents import CLAUDE, Located
    from app.services.agents.launch import launch_plan
    from app.services.agents.setup import Target

    claude_home, work = home / "home", home / "work"
    claude_home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    base = {**os.environ, "HOME": str(claude_home), "npm_config_cache": _npm_cache(),
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(CLAUDE_MAX_OUTPUT_TOKENS)}  # fmt: skip
    extra = ["-p", CLAUDE_PROMPT, "--max-turns", "1", "--output-format", "stream-json", "--verbose",
             "--include-partial-messages"]  # fmt: skip
    plan = launch_plan(CLAUDE, Located(agent, ""), Target(url, model), extra, base)
    before = _server_figures(url)
    started = time.perf_counter()
    first: float | None = None
    result: dict[str, Any] = {}
    with tempfile.TemporaryFile("w+") as errors, subprocess.Popen(
        plan.argv, env=dict(plan.env), cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors,
        text=True,
    ) as process:  # fmt: skip
        watchdog = threading.Timer(TURN_TIMEOUT_S, process.kill)  # a turn that hangs is ended, and says so
        watchdog.start()
        try:
            assert process.stdout is not None
            for line in process.stdout:
                event = _json(line)
                if first is None and _is_text_delta(event):
                    first = time.perf_counter()
                if event.get("type") == "result":
                    result = event
            code = process.wait()
        finally:
            watchdog.cancel()
        errors.seek(0)
        stderr = errors.read()
    ended = time.perf_counter()
    server = {k: v - before.get(k, 0.0) for k, v in _server_figures(url).items()}
    requests = int(server.get("ttft_count", 0))
    return {
        "exit_code": code, "ok": code == 0 and not result.get("is_error", True),
        "ttft_s": None if first is None else first - started, "turn_s": ended - started,
        "server_requests": requests, "server_prompt_tokens": int(server.get("prompt_tokens", 0)),
        "server_ttft_s": server["ttft_sum"] / requests if requests else None,
        "error": None if code == 0 else (str(result.get("result") or "") or stderr.strip())[-500:],
    }  # fmt: skip


def _server_figures(url: str) -> dict[str, float]:
    """Totals from the server's /metrics: prompt tokens, and the sum and count of times to first token."""
    import httpx

    names = {"llmws_api_prompt_tokens_total": "prompt_tokens", "llmws_api_time_to_first_token_seconds_sum":
             "ttft_sum", "llmws_api_time_to_first_token_seconds_count": "ttft_count"}  # fmt: skip
    totals: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        name, _, rest = line.partition("{")
        if name in names:
            totals[names[name]] = totals.get(names[name], 0.0) + float(rest.rsplit(" ", 1)[-1])
    return totals


def _npm_cache() -> str:
    """npm's cache as it is now: Claude Code through npx still finds its package under the throwaway HOME."""
    from app.services.agents.agents import npm_cache_dir

    return str(npm_cache_dir() or Path.home() / ".npm")


def _json(line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _is_text_delta(event: dict[str, Any]) -> bool:
    inner = event.get("event") if event.get("type") == "stream_event" else None
    if not isinstance(inner, dict) or inner.get("type") != "content_block_delta":
        return False
    delta = inner.get("delta") or {}
    return isinstance(delta, dict) and delta.get("type") == "text_delta" and bool(delta.get("text"))


def claude_lines(row: dict[str, Any]) -> list[str]:
    """The row in ``bench serve``'s text report."""
    label = f"{'Claude Code turn (TTFT / turn)':<36}"
    if "skipped" in row:
        return [f"{label}: skipped: {row['skipped']}"]
    lines = []
    for index, turn in enumerate(row["turns"]):
        which = "first turn" if index == 0 else "second turn"
        if turn["ttft_s"] is None:
            lines.append(f"{label}: failed ({which}, exit {turn['exit_code']}): {turn['error']}")
            continue
        server = "" if turn["server_ttft_s"] is None else f"; server TTFT {turn['server_ttft_s']:.1f} s"
        ended = "" if turn["ok"] else f"; ended with exit {turn['exit_code']}: {(turn['error'] or '')[:80]}"
        lines.append(f"{label}: {turn['ttft_s']:.1f} s / {turn['turn_s']:.1f} s ({which}; {turn['server_requests']} "
                     f"requests, {turn['server_prompt_tokens']:,} prompt tokens{server}{ended})")  # fmt: skip
    return lines
