"""Ready-to-paste ways to use the server: curl, the ``openai`` Python client, an Anthropic-API coding agent."""

from __future__ import annotations

import json


def curl_snippet(url: str, model: str, key: str | None) -> str:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello!"}]})
    auth = f' \\\n  -H "Authorization: Bearer {key}"' if key else ""
    return f"curl {url}/v1/chat/completions{auth} \\\n  -H \"Content-Type: application/json\" \\\n  -d '{body}'"


def openai_snippet(url: str, model: str, key: str | None) -> str:
    return (
        "from openai import OpenAI\n\n"
        f'client = OpenAI(base_url="{url}/v1", api_key="{key or "not-needed"}")\n'
        "reply = client.chat.completions.create(\n"
        f'    model="{model}",\n'
        '    messages=[{"role": "user", "content": "Hello!"}],\n'
        ")\n"
        "print(reply.choices[0].message.content)\n"
    )


def agent_snippet(url: str, model: str, key: str | None) -> str:
    """Coding agents that speak Anthropic's Messages API read these variables."""
    return (
        "# an Anthropic-API coding agent (e.g. one that reads ANTHROPIC_BASE_URL), in the same shell:\n"
        f"export ANTHROPIC_BASE_URL={url}\n"
        f"export ANTHROPIC_AUTH_TOKEN={key or 'not-needed'}\n"
        f"export ANTHROPIC_MODEL={model}\n"
    )


SNIPPETS = (("curl", curl_snippet), ("Python (openai)", openai_snippet), ("Coding agent", agent_snippet))
