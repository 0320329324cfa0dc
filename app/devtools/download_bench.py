"""``bench download``: the app's downloader against curl on the same local URL, and bytes re-fetched after a kill.

A tiny range-capable HTTP file server on 127.0.0.1 serves one generated file with ``sendfile`` in
``SERVE_CHUNK_BYTES`` slices and counts the bytes it sends, so the kill test can tell exactly how many bytes the
resumed download asked for again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SERVE_CHUNK_BYTES = 1 << 20
KILL_ATTEMPTS = 3


class FileServer:
    """Serves ``path`` at any URL, honouring ``Range: bytes=N-``; ``sent_bytes`` counts body bytes sent.

    ``RemoteFileServer`` runs it in its own process, so the client under test never shares a GIL with the
    server.
    """

    def __init__(self, path: Path) -> None:
        self.path, self.size = path, path.stat().st_size
        self.sent_bytes = 0
        self.range_starts: list[int] = []
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class RemoteFileServer:
    """A ``FileServer`` in a child process; ``stats()`` asks it for its byte count and the Range starts."""

    def __init__(self, path: Path) -> None:
        code = "import sys; from app.devtools.download_bench import _serve_main; _serve_main(sys.argv[1])"
        self.process = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.close()
            raise RuntimeError("the benchmark's file server did not start")
        self.port = int(line)
        self.url = f"http://127.0.0.1:{self.port}/bench/resolve/main/{path.name}"

    def stats(self) -> dict[str, Any]:
        import json
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=10) as response:
            return dict(json.loads(response.read()))

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def _serve_main(path: str) -> None:
    server = FileServer(Path(path))
    print(server.port, flush=True)
    server.serve_forever()


def _handler(server: FileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/stats":
                self._stats()
                return
            header = self.headers.get("Range", "")
            start = int(header[6:].split("-")[0]) if header.startswith("bytes=") else 0
            server.range_starts.append(start)
            self.send_response(206 if start else 200)
            self.send_header("Content-Length", str(server.size - start))
            self.send_header("Accept-Ranges", "bytes")
            if start:
                self.send_header("Content-Range", f"bytes {start}-{server.size - 1}/{server.size}")
            self.end_headers()
            self.wfile.flush()
            with server.path.open("rb") as f:
                offset = start
                try:
                    while offset < server.size:
                        count = min(SERVE_CHUNK_BYTES, server.size - offset)
                        sent = self.connection.sendfile(f, offset, count)
                        offset += sent
                        with server.lock:
                            server.sent_bytes += sent
                except OSError:
                    self.close_connection = True

        def _stats(self) -> None:
            import json

            with server.lock:
                body = json.dumps({"sent_bytes": server.sent_bytes, "range_starts": server.range_starts}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def _write_random_file(path: Path, size_bytes: int) -> str:
    hasher = hashlib.sha256()
    block = os.urandom(8 << 20)
    with path.open("wb") as f:
        left = size_bytes
        while left:
            part = block[: min(len(block), left)]
            f.write(part)
            hasher.update(part)
            left -= len(part)
        f.flush()
        os.fsync(f.fileno())  # its write-back must not compete with the measured runs
    return hasher.hexdigest()


def _app_fetch(url: str, partial: Path, size_bytes: int) -> str:
    from app.services.downloads.fetch import FetchPolicy, FetchTarget, Transfer, fetch_file

    target = FetchTarget(url, partial, size_bytes, {}, partial.name)
    return fetch_file(target, Transfer(), threading.Event(), FetchPolicy(stall_s=30))


def _timed(action: Any) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def bench_download(size_mb: int, runs: int = 3, workdir: Path | None = None) -> dict[str, Any]:
    """Median throughput of curl and of the app's downloader (sha256 included), alternating on one URL,
    then a kill at 50% and a resume."""
    curl = shutil.which("curl")
    if curl is None:
        raise RuntimeError("curl is not installed: the benchmark compares against it")
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        folder = Path(tmp)
        source = folder / "served.bin"
        size = size_mb * 1_000_000
        digest = _write_random_file(source, size)
        server = RemoteFileServer(source)
        try:
            out = folder / "out.bin"
            curl_times, app_times, app_ok = [], [], True
            for _ in range(runs):
                curl_times.append(_timed(lambda: subprocess.run([curl, "-sS", "-o", str(out), server.url], check=True)))
                out.unlink()
                started = time.perf_counter()
                app_ok = app_ok and _app_fetch(server.url, out, size) == digest
                app_times.append(time.perf_counter() - started)
                out.unlink()
            kill = _kill_and_resume(server, folder / "killed.bin", size, digest)
        finally:
            server.close()
    curl_s, app_s = statistics.median(curl_times), statistics.median(app_times)
    return {
        "size_bytes": size,
        "runs": runs,
        "curl_s": curl_s,
        "app_s": app_s,
        "curl_mb_per_s": size / curl_s / 1e6,
        "app_mb_per_s": size / app_s / 1e6,
        "ratio": curl_s / app_s,
        "app_sha256_ok": app_ok,
        "chunk_bytes": SERVE_CHUNK_BYTES,
        **kill,
    }


def _kill_and_resume(server: RemoteFileServer, partial: Path, size: int, digest: str) -> dict[str, Any]:
    """SIGKILL a downloading process at 50%, resume in this one; count what the server sent twice."""
    child_code = "import sys; from pathlib import Path; from app.devtools.download_bench import _app_fetch; " + (
        "_app_fetch(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))"
    )
    for _attempt in range(KILL_ATTEMPTS):  # on a busy machine the child may finish before the kill lands
        partial.unlink(missing_ok=True)
        served_before = server.stats()["sent_bytes"]
        child = subprocess.Popen([sys.executable, "-c", child_code, server.url, str(partial), str(size)])
        try:
            while child.poll() is None and (not partial.exists() or partial.stat().st_size < size // 2):
                time.sleep(0.001)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        time.sleep(0.2)  # let the server notice the closed connection
        killed_at = partial.stat().st_size
        if killed_at < size:
            break
    else:
        raise RuntimeError(f"the download finished before the kill {KILL_ATTEMPTS} times: use a larger --size-mb")
    served_kill = server.stats()["sent_bytes"] - served_before
    resumed_digest = _app_fetch(server.url, partial, size)
    stats = server.stats()
    served_total = stats["sent_bytes"] - served_before
    resumed_from = stats["range_starts"][-1]
    return {
        "killed_at_bytes": killed_at,
        "served_before_kill_bytes": served_kill,
        "resumed_from_bytes": resumed_from,
        "refetched_on_disk_bytes": max(killed_at - resumed_from, 0),  # bytes on disk asked for again
        "lost_in_flight_bytes": served_kill - killed_at,  # sent but still in socket buffers at the kill
        "refetched_bytes": served_total - size,
        "sha256_ok": resumed_digest == digest,
    }
