"""Stand-ins for the coding agents and a terminal emulator: real executables on a PATH of their own.

``install_fake_agent(bin_dir, "claude")`` writes an executable ``claude`` that, when run, makes the request the real
agent would make to the server its environment points at (Claude Code: ``POST /v1/messages`` with its token and
model; Codex: ``GET {base_url}/models`` of the ``-c`` provider with the key its ``env_key`` names; OpenCode:
``POST {baseURL}/chat/completions`` of the provider in ``OPENCODE_CONFIG_CONTENT``), writes what it saw (argv, the
variables that aim it, the HTTP status) as JSON to ``$FAKE_AGENT_RECORD``, sleeps ``$FAKE_AGENT_SLEEP`` seconds,
and exits with ``$FAKE_AGENT_EXIT``.

``install_fake_terminal(bin_dir, "x-terminal-emulator")`` writes a terminal that records its argv to
``$FAKE_TERMINAL_RECORD`` and runs the command after ``-e`` (or ``--``), as a real one does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

AGENT = r"""#!{python}
import json, os, sys, time, tomllib, urllib.error, urllib.request

PREFIXES = ("ANTHROPIC_", "CLAUDE_", "DISABLE_", "OPENCODE_", "LLMW_")


def call(method, url, token, body=None, extra=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", "Bearer " + token)
    request.add_header("Content-Type", "application/json")
    for key, value in (extra or {{}}).items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def claude(args, env):
    body = {{"model": env["ANTHROPIC_MODEL"], "max_tokens": 2, "messages": [{{"role": "user", "content": "hi"}}]}}
    return call("POST", env["ANTHROPIC_BASE_URL"] + "/v1/messages", env["ANTHROPIC_AUTH_TOKEN"], body,
                {{"anthropic-version": "2023-06-01"}})


def codex(args, env):
    config = {{}}
    for flag, value in zip(args, args[1:]):
        if flag == "-c":
            key, _, raw = value.partition("=")
            config[key] = tomllib.loads("v = " + raw)["v"]
    provider = config["model_provider"]
    base = config["model_providers." + provider + ".base_url"]
    key = env[config["model_providers." + provider + ".env_key"]]
    status, listed = call("GET", base + "/models", key)
    return status, {{"config": config, "listed": listed}}


def opencode(args, env):
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    provider_id, _, model = config["model"].partition("/")
    options = config["provider"][provider_id]["options"]
    body = {{"model": model, "max_tokens": 2, "messages": [{{"role": "user", "content": "hi"}}]}}
    return call("POST", options["baseURL"] + "/chat/completions", options["apiKey"], body)


name = os.path.basename(sys.argv[0])
args = sys.argv[1:]
env = dict(os.environ)
record = {{"name": name, "argv": args, "env": {{k: v for k, v in env.items() if k.startswith(PREFIXES)}}}}
try:
    record["status"], record["reply"] = {{"claude": claude, "codex": codex, "opencode": opencode}}[name](args, env)
except Exception as exc:
    record["error"] = repr(exc)
path = os.environ["FAKE_AGENT_RECORD"]
with open(path + ".tmp", "w") as f:
    json.dump(record, f)
os.replace(path + ".tmp", path)
time.sleep(float(os.environ.get("FAKE_AGENT_SLEEP") or 0))
sys.exit(int(os.environ.get("FAKE_AGENT_EXIT") or 0))
"""

TERMINAL = r"""#!{python}
import json, os, sys

args = sys.argv[1:]
with open(os.environ["FAKE_TERMINAL_RECORD"], "w") as f:
    json.dump({{"argv": sys.argv, "env_key": os.environ.get("LLMW_API_KEY")}}, f)
for marker in ("-e", "--", "-x"):
    if marker in args:
        command = args[args.index(marker) + 1:]
        os.execv(command[0], command)
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.format(python=sys.executable))
    path.chmod(0o755)
    return path


def install_fake_agent(bin_dir: Path, name: str) -> Path:
    return _write(bin_dir / name, AGENT)


def install_fake_terminal(bin_dir: Path, name: str = "x-terminal-emulator") -> Path:
    return _write(bin_dir / name, TERMINAL)


def read_record(path: Path) -> dict:
    return json.loads(path.read_text())
