"""Run as a child process: the parallel llama.cpp engine the API server uses (``parallel_chats`` starts it).

``python -m app.backends.llamacpp.parallel_server MODEL '{"params": LoadParams, "slots": N, "n_gpu_layers": L}'``

``params.n_ctx`` is the context of EACH sequence; the child makes one context of ``N × n_ctx`` cells, a KV stream
per sequence (``parallel_batch``), and runs up to N replies at once (``parallel_scheduler``); the rest wait here.
Commands on stdin, JSON lines:

- ``{"op": "chat", "id", "messages", "sampling", "options"}`` / ``{"op": "complete", "id", "prompt", ...}``
- ``{"op": "cancel", "id"}`` — the client went away: its sequence ends now, its slot is free.
- ``{"op": "count", "id", "messages", "tools"}`` — the prompt's tokens as a chat would render it (``count``).

Events on stdout: ``{"event": "ready", "info"}`` once (or ``{"event": "failed", "message"}``), then per request
``started`` (slot, prompt and cached tokens), ``piece`` (text), ``done`` (figures) or ``error`` (kind, message),
and ``slots`` (each slot's request and cells, the queue) about twice a second while anything runs.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from typing import Any

from app.backends.llamacpp.parallel_batch import BatchContext, BatchSettings
from app.backends.llamacpp.parallel_render import Renderer
from app.backends.llamacpp.parallel_sampling import SamplingSettings, SeqSampler
from app.backends.llamacpp.parallel_scheduler import Request, Scheduler
from app.core import safe_json
from app.core.params import GGML_TYPE_IDS, GenerationOptions, LoadParams

SLOTS_EVERY_S = 0.5
WARM_UP_ROWS = 64  # the warm-up batch: wide enough for the matrix kernels prompts use
_out: Any = None
_lines: list[str] = []


def _say(message: dict[str, Any]) -> None:
    _lines.append(json.dumps(message))


def _flush() -> None:
    if _lines:
        _out.write("\n".join(_lines) + "\n")
        _out.flush()
        _lines.clear()


def _read_stdin(inbox: queue.Queue[dict[str, Any] | None]) -> None:
    for line in sys.stdin:
        if line.strip():
            try:
                inbox.put(safe_json.loads_object(line, what="a command to the parallel worker"))
            except ValueError as exc:  # said by the main thread, which owns stdout
                inbox.put({"op": "bad", "message": str(exc)})
    inbox.put(None)


class Server:
    def __init__(self, renderer: Renderer, scheduler: Scheduler, repeat_last_n: int) -> None:
        self.renderer, self.scheduler, self._repeat_last_n = renderer, scheduler, repeat_last_n

    def handle(self, command: dict[str, Any]) -> None:
        op, request_id = command.get("op"), command.get("id")
        if op == "cancel":
            self.scheduler.cancel(request_id)
            return
        if op == "count":
            self._count(command)
            return
        if op not in ("chat", "complete"):
            _say({"id": request_id, "event": "error", "kind": "bad_command", "message": command.get("message", op)})
            return
        try:
            request = self._request(command)
        except Exception as exc:  # a template that fails, a malformed request: this request's error only
            _say({"id": request_id, "event": "error", "kind": "bad_input", "message": str(exc) or type(exc).__name__})
            return
        self.scheduler.submit(request)

    def _count(self, command: dict[str, Any]) -> None:
        try:
            options = GenerationOptions(tools=command.get("tools") or None)
            tokens, _stops = self.renderer.chat(list(command.get("messages") or []), None, options)
        except Exception as exc:  # a template that fails: this request's error only
            _say({"id": command.get("id"), "event": "error", "kind": "bad_input", "message": str(exc)})
            return
        _say({"id": command.get("id"), "event": "count", "tokens": len(tokens)})

    def _request(self, command: dict[str, Any]) -> Request:
        sampling = dict(command.get("sampling") or {})
        options = GenerationOptions(**{k: v for k, v in (command.get("options") or {}).items()
                                       if k in GenerationOptions.__dataclass_fields__})  # fmt: skip
        stop = sampling.get("stop")
        if command.get("op") == "complete":
            tokens, stops = self.renderer.completion(str(command.get("prompt") or ""), stop, options)
        else:
            tokens, stops = self.renderer.chat(list(command.get("messages") or []), stop, options)
        settings = SamplingSettings.of({**sampling, "repeat_last_n": self._repeat_last_n})
        max_tokens = sampling.get("max_tokens")
        return Request(command.get("id"), tokens, stops, int(max_tokens) if max_tokens else None,
                       SeqSampler(self.renderer._l, settings, self.renderer.llm.n_vocab()))  # fmt: skip

    def run(self, inbox: queue.Queue[dict[str, Any] | None]) -> None:
        closing, reported = False, 0.0
        while not closing or self.scheduler.busy:
            block = not self.scheduler.busy and not closing
            while True:
                try:
                    command = inbox.get(block=block)
                except queue.Empty:
                    break
                block = False
                if command is None:
                    closing = True
                    break
                self.handle(command)
            self.scheduler.step()
            if (now := time.perf_counter()) - reported >= SLOTS_EVERY_S or not self.scheduler.busy:
                reported = now
                _say({"event": "slots", "slots": self.scheduler.slot_report(), "waiting": len(self.scheduler.waiting),
                      "generated_total": self.scheduler.generated_total})  # fmt: skip
            _flush()


def _warm_up(batch: BatchContext, token: int) -> None:
    """Decode one prompt-sized batch and one single token, so that a kernel that crashes (llama.cpp's AMX or repacked
    matrix kernels on some machines: SIGSEGV on the starter model's first prompt) does it here, while starting —
    where the engine host starts the child again without them — not on a request. Measured on the starter model: a
    single-token warm-up ran, the first real prompt died."""
    width = max(1, min(WARM_UP_ROWS, batch.settings.n_batch, batch.n_ctx_per_seq - 1))
    batch.decode([(token, pos, 0, pos == width - 1) for pos in range(width)])
    batch.decode([(token, width, 0, True)])
    batch.trim(0, 0)


def _batch_settings(params: LoadParams, slots: int) -> BatchSettings:
    return BatchSettings(
        slots=slots,
        n_ctx_per_seq=params.n_ctx,
        n_batch=max(params.n_batch, slots),
        n_threads=params.n_threads,
        flash_attn=params.flash_attn,
        type_k=GGML_TYPE_IDS[params.type_k] if params.type_k != "f16" else None,
        type_v=GGML_TYPE_IDS[params.type_v] if params.type_v != "f16" else None,
    )


def main(argv: list[str]) -> int:
    global _out
    path, settings = argv[0], safe_json.loads_object(argv[1], what="the parallel worker's settings")
    _out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")  # native prints go to stderr
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    params = LoadParams.from_dict(settings.get("params") or {})
    slots = max(1, int(settings.get("slots", 1)))
    try:
        started = time.perf_counter()
        renderer = Renderer(path, params, int(settings.get("n_gpu_layers", 0)))
        import llama_cpp

        batch = BatchContext(llama_cpp, renderer.model, _batch_settings(params, slots))
        _warm_up(batch, renderer.llm.token_bos())
    except Exception as exc:  # the reason, in words, for the parent
        _say({"event": "failed", "message": str(exc) or type(exc).__name__})
        _flush()
        return 1
    info = {**renderer.info, "slots": slots, "n_ctx": batch.n_ctx_per_seq, "n_ctx_total": batch.n_ctx_per_seq * slots,
            "n_batch": batch.settings.n_batch, "load_seconds": time.perf_counter() - started}  # fmt: skip
    _say({"event": "ready", "info": info})
    _flush()
    scheduler = Scheduler(batch, renderer.ends, renderer.piece, _say)
    inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
    threading.Thread(target=_read_stdin, args=(inbox,), daemon=True).start()
    try:
        Server(renderer, scheduler, params.repeat_last_n).run(inbox)
    except RuntimeError as exc:  # llama_decode failed: every request in flight learns why
        _say({"event": "failed", "message": str(exc)})
        _flush()
        return 1
    finally:
        batch.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
