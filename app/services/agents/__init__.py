"""Coding agents pointed at the local API server, unmodified: Claude Code (Anthropic Messages), Codex (the
Responses API) and OpenCode (Chat Completions). ``agents`` is the table (how each is found, how it is installed),
``setup`` the environment and arguments that aim each at a server, ``launch`` finding the server and the model and
running the agent, ``terminal`` opening one in the desktop's terminal. Qt-free; ``llm-workstation launch``, the
Server page and ``bench serve`` use it."""
