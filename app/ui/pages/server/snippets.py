"""Ready-to-paste ways to use the server: curl, the ``openai`` Python client, an Anthropic-API coding agent.
Every value is quoted for its language (``shlex.quote`` for the shell, a string literal for Python), so a model
named ``Gemma 3 270M`` or a key with odd characters pastes and runs as it is."""

from __future__ import annotations

import json
import shlex


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


def agent_snippet(url: str, model: str, key: str | None) -> str:
    """Coding agents that speak Anthropic's Messages API read these variables."""
    return (
        "# an Anthropic-API coding agent (e.g. one that reads ANTHROPIC_BASE_URL), in the same shell:\n"
        f"export ANTHROPIC_BASE_URL={shlex.quote(url)}\n"
        f"export ANTHROPIC_AUTH_TOKEN={shlex.quote(key or 'not-needed')}\n"
        f"export ANTHROPIC_MODEL={shlex.quote(model)}\n"
    )


SNIPPETS = (("curl", curl_snippet), ("Python (openai)", openai_snippet), ("Coding agent", agent_snippet))
