"""``ApiServer``: the OpenAI- and Anthropic-compatible server over an engine host, started and stopped on the
loop the host is bound to (the window's, or ``serve``'s). Qt-free; Starlette and uvicorn are imported by
``start()``, so importing this module costs nothing.

    server = ApiServer(host, catalog, ServerConfig(port=0), defaults=workstation.model_settings)
    unsubscribe = server.subscribe(on_record)   # RequestRecord on every change (the Server page's live log)
    url = await server.start()                  # "http://127.0.0.1:8417"; raises InvalidInputError / PortInUseError
    ...
    await server.stop()                         # stops replies in flight; the loaded models stay loaded

The app's one server is ``workstation.api`` (``app.services.api.service``), which owns an ``ApiServer`` for its life.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.services.api.catalog import ModelCatalog
from app.services.api.config import ServerConfig, base_url, bind_socket
from app.services.api.records import RequestLog, RequestRecord
from app.services.api.router import ModelDefaults, ModelRouter
from app.services.engines.host import EngineHost

if TYPE_CHECKING:
    from app.services.api.metrics import ApiMetrics
    from app.services.api.routes import Api

log = logging.getLogger("app.services.api")

SHUTDOWN_GRACE_S = 3.0


class ApiServer:
    def __init__(
        self,
        host: EngineHost,
        catalog: ModelCatalog,
        config: ServerConfig | None = None,
        *,
        defaults: ModelDefaults | None = None,
    ) -> None:
        self.host = host
        self.catalog = catalog
        self.config = config or ServerConfig()
        self.defaults = defaults
        self.requests = RequestLog()
        self.url: str | None = None
        self._server: Any = None  # uvicorn.Server
        self._task: asyncio.Task[None] | None = None
        self._socket: socket.socket | None = None
        self._router: ModelRouter | None = None
        self._api: Api | None = None
        self.metrics: ApiMetrics | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def serving_task(self) -> asyncio.Task[None] | None:
        """The task that serves while the server runs (its end, unless ``stop`` ended it, is a failure)."""
        return self._task

    def subscribe(self, listener: Callable[[RequestRecord], None]) -> Callable[[], None]:
        """Hear of every request record change (on the server's loop); returns the function that unsubscribes."""
        return self.requests.subscribe(listener)

    async def start(self, config: ServerConfig | None = None) -> str:
        """Bind and start accepting connections (with ``config`` from now on, if given); returns the base URL.
        Raises InvalidInputError for a config that is not safe (another machine could reach it without a key) and
        PortInUseError for a taken port."""
        if self.running:
            assert self.url is not None
            return self.url
        if config is not None:
            self.config = config
        self.config.check()
        self.catalog.keep_ids_in(self.config.state_dir)  # ids given stay across restarts
        sock = bind_socket(self.config.host, self.config.port)
        try:
            self._server = self._uvicorn(sock)
        except BaseException:
            sock.close()
            raise
        self._socket = sock
        self.url = base_url(sock, self.config.host)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        try:
            while not self._server.started:
                if self._task.done():
                    await self._task  # raises what stopped it
                    raise RuntimeError("the API server stopped while starting")
                await asyncio.sleep(0.01)
        except BaseException:
            await self.stop()  # the socket and the router go with it
            raise
        log.info("API server listening on %s", self.url)
        return self.url

    async def stop(self) -> None:
        """Stop accepting connections and end the replies in flight. The loaded models stay loaded (the host's
        owner unloads them), but for the parallel llama.cpp engine's, which only the server uses."""
        task, server = self._task, self._server
        if task is None or server is None:
            return
        server.should_exit = True
        if self._api is not None:
            self._api.stop_replies()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(task), SHUTDOWN_GRACE_S + 2)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._router is not None:
            self._router.close()
        await self.host.parallel.close()  # the parallel llama.cpp engine serves only this server: its memory is freed
        if self._socket is not None:
            self._socket.close()
        self._task = self._server = self._socket = self._router = self._api = None
        self.url = None
        log.info("API server stopped")

    def _uvicorn(self, sock: socket.socket) -> Any:
        import uvicorn

        from app.services.api.asgi import build_app
        from app.services.api.metrics import ApiMetrics
        from app.services.api.routes import Api

        self._router = ModelRouter(
            self.host, self.defaults, idle_ttl_s=self.config.idle_ttl_s, max_queue=self.config.max_queue,
            n_ctx=self.config.n_ctx, n_parallel=self.config.n_parallel,
        )  # fmt: skip
        if self.metrics is None:  # one registry for the server's life: counts survive a restart
            metrics = self.metrics = ApiMetrics()
            metrics.watch_parallel(self.host.parallel.snapshot)
            self.requests.subscribe(lambda record: metrics.observe(record) if record.finished else None)
        self._api = Api(self.host, self.catalog, self._router, self.config, self.requests, self.metrics)
        app = build_app(self._api)
        config = uvicorn.Config(
            app, http=_http_protocol(), lifespan="off", log_config=None, access_log=False, server_header=False,
            timeout_graceful_shutdown=int(SHUTDOWN_GRACE_S), ws="none",
        )  # fmt: skip
        return _quiet_server_class()(config)


def _quiet_server_class() -> type:
    import uvicorn

    class QuietServer(uvicorn.Server):
        """uvicorn's server without its signal handlers: the owner (the window, ``serve``) decides on exit."""

        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            yield

    return QuietServer


def _http_protocol() -> str:
    """uvicorn's C parser (httptools) where it is installed — a millisecond less per request than h11, which
    matters at high concurrency next to a vLLM on the same cores — else h11."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "h11"
    return "httptools"
