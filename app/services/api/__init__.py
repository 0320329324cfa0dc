"""The local API server: OpenAI- and Anthropic-compatible HTTP endpoints over every engine the engine host owns.

HTTP side: Starlette (routing, requests, CORS) under uvicorn (an asyncio server that runs on a loop it is given,
so the window's qasync loop and ``serve``'s own loop both host it, next to the engine host that must stay on one
loop). Not FastAPI: its value is pydantic request models and their 422 errors, but every body here goes through
the app's bounded JSON loader (``app.core.safe_json``) and comes back in OpenAI's or Anthropic's own error
shapes, so FastAPI would add import time and nothing used. Not sse-starlette: one small ASGI response
(``sse.EventStream``) streams the events and stops the reply at the next token when the client goes away.

Both are imported on first use only (``ApiServer.start``): importing ``app.services.api.server`` costs the
window nothing. Qt-free (import-linter checks it).
"""
