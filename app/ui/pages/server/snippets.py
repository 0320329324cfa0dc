"""Ready-to-paste ways to use the server: curl, the ``openai`` Python client, each coding agent.
Every value is quoted for its language (``shlex.quote`` for the shell, a string literal for Python), so a model
named ``Gemma 3 270M`` or a key with odd characters pastes and runs as it is."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from urllib.parse import urlsplit

from app.services.agents.agents import AGENTS, Agent
from app.services.agents.setup import Target, shell_snippet

PLACEHOLDER_MODEL = "MODEL"  # no model loaded: the snippets say where the id goes


def curl_snippet(url: str, model: str, key: str | None) -> str:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello!"}]})
    auth = f" \\\n  -H {shlex.quote(f'Authorization: Bearer {key}')}" if key else ""
    endpoint = shlex.quote(f"{url}/v1/chat/completions")
    return f"curl {endpoint}{auth} \\\n  -H 'Content-Type: application/json' \\\n  -d {shlex.quote(body)}"


def openai_snippet(url: str, model: str, key: str | None) -> str:
    def literal(text: str) -> str:
        return json.dumps(text)  # a JSON string is a Python string literal

    return (
        "from openai import OpenAI\n\n"
        f"client = OpenAI(base_url={literal(url + '/v1')}, api_key={literal(key or 'not-needed')})\n"
        "reply = client.chat.completions.create(\n"
        f"    model={literal(model)},\n"
        '    messages=[{"role": "user", "content": "Hello!"}],\n'
        ")\n"
        "print(reply.choices[0].message.content)\n"
    )


def agent_snippet(agent: Agent, url: str, model: str, key: str | None) -> str:
    """The agent on this server as it pastes into bash or zsh (what ``llm-workstation launch`` sets), after a
    comment naming that shorter command."""
    port = urlsplit(url).port
    chosen = [] if model == PLACEHOLDER_MODEL else ["--model", model]  # launch picks one itself
    launch = shlex.join(["llm-workstation", "launch", agent.id, *chosen, *(["--port", str(port)] if port else [])])
    comment = f"# {agent.name} on this server (or: {launch})".replace("\n", " ").replace("\r", " ")
    return comment + "\n" + shell_snippet(agent, Target(url, model, key))


def _for(agent: Agent) -> Callable[[str, str, str | None], str]:
    return lambda url, model, key: agent_snippet(agent, url, model, key)


SNIPPETS: tuple[tuple[str, Callable[[str, str, str | None], str]], ...] = (
    ("curl", curl_snippet),
    ("Python (openai)", openai_snippet),
    *((agent.name, _for(agent)) for agent in AGENTS),
)
