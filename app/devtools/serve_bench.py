"""``llm-workstation bench serve``: the API server against the baselines, measured in the same run.

1. One stream at a time on the starter model (or ``--model``), the same prompts, seeds and settings on every path:
   - raw llama-cpp-python in this process (the floor: no process boundary, no HTTP);
   - ``llm-workstation serve`` (a child process: its engine host, its llama.cpp worker, uvicorn);
   - ``python -m llama_cpp.server`` (llama-cpp-python's own OpenAI server; the ``bench`` extra).
   Targets: API vs raw decode ≥ 0.97×, TTFT overhead ≤ 15 ms; API vs llama_cpp.server decode ≥ 1.0×, TTFT no worse.
2. With ``--vllm-url``: concurrency 32 through the API (``serve --vllm-url``) against the same client straight to
   vLLM; target ≥ 0.95× the throughput.
3. One Claude Code turn's time to first token (app/devtools/claude_turn_bench.py), or why it was skipped.

Both servers are child processes measured by the same httpx client reading the SSE stream; paths alternate run
by run so drift on the machine hits them alike. Decode: (tokens − 1) / (last token − first token) over ``--runs``
long replies, tokens from the reply's usage when the server reports it. TTFT: from sending the request to the first
content token, over 24 short replies per path (a long reply's TTFT swings with whatever else the machine runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from app.backends.llamacpp.repack import NO_REPACK_ENV, model_params_without_repacking
from app.core.params import LoadParams, SamplingParams
from app.devtools.chat_bench import BENCH_PROMPTS, RawPath, Sample
from app.devtools.claude_turn_bench import CLAUDE_CONTEXT, claude_code_missing, claude_lines, claude_turns

SERVER_START_TIMEOUT_S = 120.0
# llama_cpp.server with llama.cpp's weight repacking off (as the app's worker runs after its kernels crashed here)
NO_REPACK_SERVER = (
    "import runpy, sys\n"
    "from app.backends.llamacpp.repack import model_params_without_repacking\n"
    "sys.argv = ['llama_cpp.server', *sys.argv[1:]]\n"
    "with model_params_without_repacking(True):\n"
    "    runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)\n"
)
VLLM_CONCURRENCY = 32
TTFT_RUNS = 24
SAMPLING: dict[str, float | int] = {
    "temperature": 0.8,
    "top_p": 0.95,
    "top_k": 40,
    "min_p": 0.05,
    "repeat_penalty": 1.1,
}


@dataclass
class PathResult:
    """``samples``: the long replies (decode speed); ``first_token_ms``: the short ones (TTFT)."""

    label: str
    samples: list[Sample] = field(default_factory=list)
    first_token_ms: list[float] = field(default_factory=list)

    @property
    def ttft_ms(self) -> float:
        return statistics.median(self.first_token_ms)

    @property
    def ttft_min_ms(self) -> float:
        """The fastest first token: what the path itself costs, with the least interference from the machine."""
        return min(self.first_token_ms)

    @property
    def decode_tokens_per_s(self) -> float:
        return statistics.median(s.decode_tokens_per_s for s in self.samples)

    def summary(self) -> dict[str, Any]:
        return {
            "label": self.label, "ttft_ms": self.ttft_ms, "ttft_min_ms": self.ttft_min_ms,
            "decode_tokens_per_s": self.decode_tokens_per_s, "samples": [asdict(s) for s in self.samples],
            "first_token_ms": self.first_token_ms,
        }  # fmt: skip


# --- the servers ------------------------------------------------------------------------------------------------
class ChildServer:
    """A server in a child process on a free port; ``url`` once it answers."""

    def __init__(self, command: list[str], env: dict[str, str], url: str, ready_path: str) -> None:
        self.url = url
        self._ready_path = ready_path
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(command, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: {self.output()[-2000:]}")
            try:
                if httpx.get(self.url + self._ready_path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the server did not answer within {SERVER_START_TIMEOUT_S:.0f} s")

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_api_server(model: Path, load: LoadParams, home: Path, no_repack: bool) -> ChildServer:
    """``llm-workstation serve`` on ``model``'s folder, with ``load`` saved as the model's settings."""
    from app.services.model_settings import FILE_NAME, ModelSettings, ModelSettingsStore

    ModelSettingsStore(home / "data" / FILE_NAME).set(str(model), ModelSettings(load=load))
    port = _free_port()
    command = [sys.executable, "-m", "app", "serve", "--port", str(port), "--models-dir", str(model.parent),
               "--ttl", "-1", "--log-level", os.environ.get("LLMW_BENCH_LOG", "WARNING")]  # fmt: skip
    env = {**os.environ, "LLMW_HOME": str(home), "LLMW_API_KEY": "", **({NO_REPACK_ENV: "1"} if no_repack else {})}
    return ChildServer(command, env, f"http://127.0.0.1:{port}", "/health")


def start_llama_cpp_server(model: Path, load: LoadParams, no_repack: bool) -> ChildServer:
    """``python -m llama_cpp.server`` with the same model and settings."""
    port = _free_port()
    start = ["-c", NO_REPACK_SERVER] if no_repack else ["-m", "llama_cpp.server"]
    command = [
        sys.executable, *start, "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(load.n_ctx), "--n_batch", str(load.n_batch), "--n_gpu_layers", "0",
        "--last_n_tokens_size", str(load.repeat_last_n),
    ]  # fmt: skip
    if load.chat_format:
        command += ["--chat_format", load.chat_format]
    if load.n_threads:
        command += ["--n_threads", str(load.n_threads)]  # n_threads_batch: the same default (all cores) as ours
    return ChildServer(command, dict(os.environ), f"http://127.0.0.1:{port}", "/v1/models")


def llama_cpp_server_missing() -> str | None:
    """What the baseline server needs and this environment lacks (the ``bench`` extra), or None."""
    import importlib.util

    missing = [m for m in ("fastapi", "sse_starlette", "starlette_context", "pydantic_settings", "uvicorn")
               if importlib.util.find_spec(m) is None]  # fmt: skip
    if not missing:
        return None
    return f"llama_cpp.server needs {', '.join(missing)}: pip install 'llm-workstation[bench]'"


# --- one streamed chat through an OpenAI-compatible server ---------------------------------------------------
def stream_sample(http: Any, model: str, prompt: str, sampling: SamplingParams) -> Sample:
    """One streamed chat on ``http`` (an ``httpx.Client`` made once per server: a client's set-up, TLS context
    included, is no part of a server's TTFT)."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True,
            "stream_options": {"include_usage": True}, "max_tokens": sampling.max_tokens, "seed": sampling.seed,
            **SAMPLING}  # fmt: skip
    first = last = 0.0
    chunks, usage_tokens = 0, None
    started = time.perf_counter()
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage_tokens = chunk["usage"]["completion_tokens"]
            choices = chunk.get("choices") or []
            if choices and (choices[0].get("delta") or {}).get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
                chunks += 1
    tokens = usage_tokens if usage_tokens is not None else chunks
    rate = (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0
    return Sample((first - started) * 1000, rate, tokens)


def _client(url: str) -> Any:
    """An httpx client that sends each request at once (TCP_NODELAY: without it the body waits for the ACK of the
    headers, tens of milliseconds on any server)."""
    import httpx

    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    return httpx.Client(base_url=url, timeout=300, transport=httpx.HTTPTransport(socket_options=nodelay))


def model_id(url: str, path: Path) -> str:
    """The id the API server lists for ``path`` (its file name also resolves, but the bench uses the id)."""
    import httpx

    ids = [m["id"] for m in httpx.get(url + "/v1/models", timeout=30).json()["data"] if m["owned_by"] == "llamacpp"]
    return ids[0] if len(ids) == 1 else path.name


# --- the single-stream comparison -------------------------------------------------------------------------------
def bench_single_stream(
    model: Path, load: LoadParams, max_tokens: int, runs: int, baseline: bool, no_repack: bool
) -> dict[str, Any]:

    home = Path(tempfile.mkdtemp(prefix="llmw-bench-serve-"))
    stack = contextlib.ExitStack()
    api = start_api_server(model, load, home, no_repack)
    other = start_llama_cpp_server(model, load, no_repack) if baseline else None
    raw_path: RawPath | None = None
    results = {"raw": PathResult("raw llama-cpp-python (in-process)"), "api": PathResult("llm-workstation serve")}
    if other is not None:
        results["llama_cpp_server"] = PathResult("python -m llama_cpp.server")
    try:
        api.wait_ready()
        if other is not None:
            other.wait_ready()
        name = model_id(api.url, model)
        with model_params_without_repacking(no_repack):
            raw_path = RawPath(str(model), load)
        api_http = stack.enter_context(_client(api.url))
        other_http = stack.enter_context(_client(other.url)) if other else None
        paths = {"raw": raw_path.run, "api": lambda p, s: stream_sample(api_http, name, p, s)}
        if other_http is not None:
            paths["llama_cpp_server"] = lambda p, s: stream_sample(other_http, "model", p, s)
        for index in range(runs + 1):  # run 0 warms every path up and is not counted
            prompt = BENCH_PROMPTS[index % len(BENCH_PROMPTS)]
            sampling = SamplingParams.from_dict({**SAMPLING, "max_tokens": max_tokens, "seed": 1234 + index})
            for key, run in paths.items():
                sample = run(prompt, sampling)
                if index:
                    results[key].samples.append(sample)
        for index in range(TTFT_RUNS):  # many short replies: the first token's time, with the noise averaged out
            prompt = f"{BENCH_PROMPTS[index % len(BENCH_PROMPTS)]} ({index})"
            sampling = SamplingParams.from_dict({**SAMPLING, "max_tokens": 2, "seed": index})
            for key, run in paths.items():
                results[key].first_token_ms.append(run(prompt, sampling).ttft_ms)
    finally:
        stack.close()
        if raw_path is not None:
            raw_path.close()
        api.stop()
        if other is not None:
            other.stop()
        shutil.rmtree(home, ignore_errors=True)
    return _single_report(model, load, max_tokens, results)


def _single_report(model: Path, load: LoadParams, max_tokens: int, results: dict[str, PathResult]) -> dict[str, Any]:
    raw, api = results["raw"], results["api"]
    report: dict[str, Any] = {
        "model": str(model), "n_ctx": load.n_ctx, "chat_format": load.chat_format, "n_threads": load.n_threads,
        "max_tokens": max_tokens, "runs": len(api.samples),
        "paths": {key: r.summary() for key, r in results.items()},
        "api_vs_raw_decode": api.decode_tokens_per_s / raw.decode_tokens_per_s if raw.decode_tokens_per_s else None,
        "api_vs_raw_ttft_overhead_ms": api.ttft_ms - raw.ttft_ms,
        "api_vs_raw_ttft_min_overhead_ms": api.ttft_min_ms - raw.ttft_min_ms,
    }  # fmt: skip
    if (other := results.get("llama_cpp_server")) is not None:
        report["api_vs_llama_cpp_server_decode"] = (
            api.decode_tokens_per_s / other.decode_tokens_per_s if other.decode_tokens_per_s else None
        )
        report["api_vs_llama_cpp_server_ttft_ms"] = api.ttft_ms - other.ttft_ms
        report["api_vs_llama_cpp_server_ttft_min_ms"] = api.ttft_min_ms - other.ttft_min_ms
    return report


# --- vLLM at concurrency 32 -------------------------------------------------------------------------------------
async def _throughput(url: str, model: str, requests: int, key: str | None, max_tokens: int) -> dict[str, Any]:
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    limits = httpx.Limits(max_connections=VLLM_CONCURRENCY, max_keepalive_connections=VLLM_CONCURRENCY)
    queue = list(range(requests))
    tokens, failures = 0, 0

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal tokens, failures
        while queue:
            index = queue.pop()
            prompt = BENCH_PROMPTS[index % len(BENCH_PROMPTS)]
            body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                    "temperature": 0, "seed": index}  # fmt: skip
            try:
                response = await http.post("/v1/chat/completions", json=body)
            except httpx.HTTPError:  # counted, not fatal: the figures say how many failed
                failures += 1
                continue
            if response.status_code != 200:
                failures += 1
                continue
            tokens += int(response.json()["usage"]["completion_tokens"])

    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=600) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(VLLM_CONCURRENCY)))
        elapsed = time.perf_counter() - started
    return {"tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed, "failures": failures}


def bench_vllm(vllm_url: str, requests: int, max_tokens: int, rounds: int = 3) -> dict[str, Any]:
    """Throughput at concurrency 32: ``rounds`` pairs of (straight to vLLM, through the API), alternating so load
    on the machine hits both alike; the medians are compared."""
    import httpx

    key = os.environ.get("VLLM_API_KEY") or None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    served = httpx.get(vllm_url.rstrip("/") + "/v1/models", headers=headers, timeout=30).json()["data"][0]["id"]
    home = Path(tempfile.mkdtemp(prefix="llmw-bench-vllm-"))
    port = _free_port()
    command = [sys.executable, "-m", "app", "serve", "--port", str(port), "--vllm-url", vllm_url, "--log-level",
               "WARNING"]  # fmt: skip
    api = ChildServer(command, {**os.environ, "LLMW_HOME": str(home), "LLMW_API_KEY": ""},
                      f"http://127.0.0.1:{port}", "/health")  # fmt: skip
    direct: list[dict[str, Any]] = []
    through: list[dict[str, Any]] = []
    try:
        api.wait_ready()
        for url, auth in ((vllm_url, key), (api.url, None)):  # warm-up, both ways
            asyncio.run(_throughput(url, served, VLLM_CONCURRENCY, auth, max_tokens))
        for _round in range(rounds):
            direct.append(asyncio.run(_throughput(vllm_url, served, requests, key, max_tokens)))
            cpu_before = _cpu_seconds(api.proc.pid)
            through.append(asyncio.run(_throughput(api.url, served, requests, None, max_tokens)))
            through[-1]["api_cpu_ms_per_request"] = (_cpu_seconds(api.proc.pid) - cpu_before) * 1000 / requests
    finally:
        api.stop()
        shutil.rmtree(home, ignore_errors=True)
    direct_median = statistics.median(r["tokens_per_s"] for r in direct)
    through_median = statistics.median(r["tokens_per_s"] for r in through)
    pairs = [t["tokens_per_s"] / d["tokens_per_s"] for d, t in zip(direct, through, strict=True) if d["tokens_per_s"]]
    return {
        "served_model": served, "concurrency": VLLM_CONCURRENCY, "requests": requests, "max_tokens": max_tokens,
        "direct": direct, "through_api": through, "direct_tokens_per_s": direct_median,
        "through_api_tokens_per_s": through_median,
        "ratio": through_median / direct_median if direct_median else None,
        "pair_ratio_median": statistics.median(pairs) if pairs else None,
        "api_cpu_ms_per_request": statistics.median(r["api_cpu_ms_per_request"] for r in through),
    }  # fmt: skip


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the API server's process has used: its own cost per request, which the
    throughput ratio shows only through the noise of everything else the machine runs."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


# --- the whole bench ------------------------------------------------------------------------------------------
def bench_serve(
    model: Path, load: LoadParams, *, max_tokens: int, runs: int, baseline: bool, no_repack: bool,
    vllm_url: str | None = None, vllm_requests: int = 96, claude_code: bool = True,
) -> dict[str, Any]:  # fmt: skip
    single = bench_single_stream(model, load, max_tokens, runs, baseline, no_repack)
    report: dict[str, Any] = {"single_stream": {**single, "repacking": not no_repack}}
    if vllm_url:
        report["vllm"] = bench_vllm(vllm_url, vllm_requests, 64)
    if claude_code:  # after the other paths: its long prompt does not share the machine with them
        report["claude_code"] = bench_claude_code(model, load, no_repack)
    return report


def bench_claude_code(model: Path, load: LoadParams, no_repack: bool) -> dict[str, Any]:
    """One Claude Code turn, twice, against ``serve`` with the model's context raised to hold Claude Code's prompt
    (app/devtools/claude_turn_bench.py); ``{"skipped": why}`` without Claude Code."""
    if (missing := claude_code_missing()) is not None:
        return {"skipped": missing}
    home = Path(tempfile.mkdtemp(prefix="llmw-bench-claude-"))
    n_ctx = max(load.n_ctx, CLAUDE_CONTEXT)
    api = start_api_server(model, replace(load, n_ctx=n_ctx), home / "llmw", no_repack)
    try:
        api.wait_ready()
        return {**claude_turns(api.url, model_id(api.url, model), home), "n_ctx": n_ctx}
    finally:
        api.stop()
        shutil.rmtree(home, ignore_errors=True)


def starter_model() -> Path:
    """The starter model, assembled into a temp folder (the demo extra must be installed)."""
    from app.services.starter_model import ensure_starter_model

    return ensure_starter_model(Path(tempfile.gettempdir()) / "llmw-bench-starter")


def report_lines(report: dict[str, Any]) -> list[str]:
    single = report["single_stream"]
    head = (
        f"model {Path(single['model']).name}  n_ctx {single['n_ctx']}  chat_format {single['chat_format']}  "
        f"threads {single['n_threads']}  max_tokens {single['max_tokens']}  runs {single['runs']} (medians)"
        f"{'' if single.get('repacking', True) else '  (weight repacking off on every path)'}"
    )
    lines = [head]
    for result in single["paths"].values():
        speed = (f"decode {result['decode_tokens_per_s']:7.1f} tok/s   TTFT {result['ttft_ms']:7.1f} ms "
                 f"(fastest {result['ttft_min_ms']:.1f})")  # fmt: skip
        lines.append(f"{result['label']:<36}: {speed}")
    lines.append(f"{'API / raw decode':<36}: {single['api_vs_raw_decode']:.3f}   (target >= 0.97)")
    lines.append(f"{'API - raw TTFT':<36}: {single['api_vs_raw_ttft_overhead_ms']:+.1f} ms (fastest: "
                 f"{single['api_vs_raw_ttft_min_overhead_ms']:+.1f} ms; target <= 15)")  # fmt: skip
    if "api_vs_llama_cpp_server_decode" in single:
        lines.append(f"{'API / llama_cpp.server decode':<36}: {single['api_vs_llama_cpp_server_decode']:.3f}   "
                     "(target >= 1.0)")  # fmt: skip
        lines.append(f"{'API - llama_cpp.server TTFT':<36}: {single['api_vs_llama_cpp_server_ttft_ms']:+.1f} ms "
                     f"(fastest: {single['api_vs_llama_cpp_server_ttft_min_ms']:+.1f} ms; target <= 0)")  # fmt: skip
    if (vllm := report.get("vllm")) is not None:
        direct, through = vllm["direct_tokens_per_s"], vllm["through_api_tokens_per_s"]
        lines.append(
            f"{'vLLM c=32 straight / through API':<36}: {direct:.1f} / {through:.1f} tok/s   "
            f"ratio {vllm['ratio']:.3f} (target >= 0.95; round by round: {vllm['pair_ratio_median']:.3f})"
        )
        lines.append(f"{'API server CPU per request':<36}: {vllm['api_cpu_ms_per_request']:.2f} ms")  # fmt: skip
    if (claude := report.get("claude_code")) is not None:
        lines += claude_lines(claude)
    return lines
