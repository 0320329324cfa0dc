"""The one reader of a vLLM server's ``/metrics`` over HTTP (vLLM serves it without a key): the vLLM page, the
bench and the monitor's thread read it here; the figures come from ``app.core.vllm.metrics.figures_from_page``,
which the vLLM backend's own read uses too. Every failure is a ``MetricsUnavailableError`` in words."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core.errors import UnavailableError
from app.core.lazy_import import lazy_import
from app.core.vllm.metrics import MetricsParseError, VllmMetrics, figures_from_page

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_import("httpx")  # ~100 ms: loaded when first used

TIMEOUT_S = 10.0
BLOCKING_TIMEOUT_S = 1.0  # the monitor's thread samples at 2 Hz: a slow server is a gap, not a stall


class MetricsUnavailableError(UnavailableError):
    """The server's figures could not be read; the message says why and what to do."""


def metrics_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/metrics"


async def read_metrics(
    base_url: str, *, client: httpx.AsyncClient | None = None, timeout_s: float = TIMEOUT_S
) -> VllmMetrics:
    """One reading of the server at ``base_url``, through ``client`` when given (its connections are reused)."""
    own = client is None
    http = client if client is not None else httpx.AsyncClient(timeout=timeout_s, trust_env=False)
    try:
        response = await http.get(metrics_url(base_url), timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise unreachable(base_url, exc, timeout_s) from None
    finally:
        if own:
            await http.aclose()
    return _figures(response, base_url)


class BlockingMetricsReader:
    """For a worker thread (the monitor's sampler): one kept-alive connection, closed with ``close``."""

    def __init__(self, timeout_s: float = BLOCKING_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._client: httpx.Client | None = None

    def page(self, base_url: str) -> str:
        """The page's text (blocking); MetricsUnavailableError when it cannot be read."""
        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout_s, trust_env=False)
        try:
            response = self._client.get(metrics_url(base_url))
        except httpx.HTTPError as exc:
            raise unreachable(base_url, exc, self.timeout_s) from None
        return _text(response, base_url)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()


def unreachable(base_url: str, exc: httpx.HTTPError, timeout_s: float) -> MetricsUnavailableError:
    if isinstance(exc, httpx.ConnectError):
        return MetricsUnavailableError(
            f"Nothing answers at {base_url}. Start vLLM there (vllm serve MODEL --port PORT) or check the address."
        )
    if isinstance(exc, httpx.TimeoutException):
        return MetricsUnavailableError(
            f"vLLM at {base_url} did not answer within {timeout_s:g} s. It may be busy; try again."
        )
    return MetricsUnavailableError(
        f"The connection to {base_url} failed ({type(exc).__name__}). Check the address and try again."
    )


def _text(response: httpx.Response, base_url: str) -> str:
    if response.status_code != 200:
        raise MetricsUnavailableError(f"{base_url} has no readable /metrics (HTTP {response.status_code}).")
    return str(response.text)


def _figures(response: httpx.Response, base_url: str) -> VllmMetrics:
    try:
        return figures_from_page(_text(response, base_url), base_url)
    except MetricsParseError as exc:
        raise MetricsUnavailableError(str(exc)) from None


def metrics_summary(m: VllmMetrics) -> str:
    """``KV cache 12.5 % of 27,000 blocks × 16 tokens · 1 running, 0 waiting · 0 preemptions · prefix hits 45 %``."""
    parts = []
    if m.kv_cache_usage_fraction is not None:
        kv = f"KV cache {100 * m.kv_cache_usage_fraction:.1f} % used"
        if m.num_gpu_blocks is not None and m.block_size_tokens is not None:
            kv += f" of {m.num_gpu_blocks:,} blocks × {m.block_size_tokens} tokens ({m.kv_capacity_tokens:,} tokens)"
        parts.append(kv)
    if m.requests_running is not None or m.requests_waiting is not None:
        parts.append(f"{m.requests_running or 0} running, {m.requests_waiting or 0} waiting")
    if m.preemptions_total is not None:
        parts.append(f"{m.preemptions_total:.0f} preemptions")
    if (rate := m.prefix_cache_hit_rate) is not None:
        parts.append(f"prefix-cache hits {100 * rate:.0f} %")
    if (accepted := m.spec_acceptance_rate) is not None:
        parts.append(f"speculative drafts accepted {100 * accepted:.0f} %")
    return " · ".join(parts) or "the server reports no KV-cache or queue figures"
