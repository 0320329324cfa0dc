"""Run as a child process: llama.cpp parallel sequences for ``bench run --backend llamacpp --parallel``.

``python -m app.backends.llamacpp.parallel_worker MODEL '{"slots": N, "n_ctx_per_seq": 4096, ...}'``

One context with ``n_seq_max = N`` and ``n_ctx = N * n_ctx_per_seq`` (a KV stream per sequence). Requests come
on stdin as JSON lines ``{"id", "prompt", "max_tokens"}``; each is tokenized as plain text (no chat template: a
raw throughput measurement) and admitted into a free sequence id (continuous batching: a finished sequence's
cells are cleared with ``llama_memory_seq_rm`` and the next waiting request takes its id). New sequences are
prefilled together in batches of at most ``n_batch`` tokens, then every active sequence decodes one token per
step in ONE ``llama_decode``; sampling is greedy (argmax of the sequence's logits) and EOS is ignored, so each
reply is exactly ``max_tokens`` long. Results go to stdout as JSON lines: ``{"ready": {...}}`` once, then
``{"id", "tokens", "ttft_ms", "latency_ms"}`` or ``{"id", "error"}`` per request; ``{"error"}`` if it cannot start.
TTFT runs from the start of the request's prefill to its first sampled token; latency from its arrival here.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from app.core import safe_json

_EOF = object()


_protocol_out: Any = None  # the real stdout once native prints are sent to stderr (see main)


def _say(message: dict[str, Any]) -> None:
    out = _protocol_out or sys.stdout
    out.write(json.dumps(message) + "\n")
    out.flush()


def _keep_native_prints_off_the_protocol() -> None:
    """llama.cpp may print to fd 1; the JSON lines keep a private copy of stdout and fd 1 goes to stderr."""
    global _protocol_out
    _protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())


@dataclass
class _Seq:
    request_id: Any
    tokens: list[int]
    max_tokens: int
    arrived: float
    prefill_started: float = 0.0
    first_token_at: float = 0.0
    generated: int = 0
    pos: int = 0
    last: int = 0
    slot: int = -1
    out: list[int] = field(default_factory=list)


class _Engine:
    def __init__(self, llama_cpp: Any, model: Any, settings: dict[str, Any]) -> None:
        import numpy as np

        self.np, self.l, self.model = np, llama_cpp, model
        self.slots = max(1, int(settings.get("slots", 1)))
        self.n_ctx_per_seq = max(16, int(settings.get("n_ctx_per_seq", 4096)))
        self.n_batch = max(self.n_ctx_per_seq, self.slots)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = self.n_ctx_per_seq * self.slots
        params.n_batch = self.n_batch
        params.n_ubatch = min(512, self.n_batch)
        params.n_seq_max = self.slots
        params.kv_unified = False  # one KV stream of n_ctx_per_seq cells per sequence
        threads = int(settings.get("n_threads") or os.cpu_count() or 1)
        params.n_threads = params.n_threads_batch = threads
        self.ctx = llama_cpp.llama_init_from_model(model, params)
        if not self.ctx:
            raise RuntimeError(
                "llama.cpp could not create the context (too little memory for the context size × slots?)"
            )
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)

    def close(self) -> None:
        self.l.llama_batch_free(self.batch)
        self.l.llama_free(self.ctx)

    def tokenize(self, text: str) -> list[int]:
        data = text.encode("utf-8")
        size = len(data) + 8
        buffer = (self.l.llama_token * size)()
        count = self.l.llama_tokenize(self.vocab, data, len(data), buffer, size, True, False)
        return list(buffer[:count]) if count > 0 else []

    def _fill(self, entries: list[tuple[int, int, int, bool]]) -> None:
        batch = self.batch
        for i, (token, pos, seq_id, logits) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq_id, logits
        batch.n_tokens = len(entries)
        code = self.l.llama_decode(self.ctx, batch)
        if code != 0:
            raise RuntimeError(f"llama_decode failed (code {code})")

    def _argmax(self, index: int) -> int:
        logits = self.l.llama_get_logits_ith(self.ctx, index)
        return int(self.np.ctypeslib.as_array(logits, shape=(self.n_vocab,)).argmax())

    def prefill(self, seqs: list[_Seq]) -> None:
        """Prefill ``seqs`` together, ``n_batch`` tokens per decode; sample each one's first token."""
        work = [(s, i) for s in seqs for i in range(len(s.tokens))]
        start = time.perf_counter()
        for s in seqs:
            s.prefill_started = start
        for begin in range(0, len(work), self.n_batch):
            chunk = work[begin : begin + self.n_batch]
            self._fill([(s.tokens[i], i, s.slot, i == len(s.tokens) - 1) for s, i in chunk])
            for index, (s, i) in enumerate(chunk):
                if i == len(s.tokens) - 1:
                    self._take(s, self._argmax(index))
                    s.pos = len(s.tokens)

    def step(self, seqs: list[_Seq]) -> None:
        """One decode step for every sequence in ``seqs`` (each has a sampled token not yet in the cache)."""
        self._fill([(s.last, s.pos, s.slot, True) for s in seqs])
        for index, s in enumerate(seqs):
            s.pos += 1
            self._take(s, self._argmax(index))

    def _take(self, s: _Seq, token: int) -> None:
        s.last = token
        s.generated += 1
        if s.generated == 1:
            s.first_token_at = time.perf_counter()

    def free(self, slot: int) -> None:
        self.l.llama_memory_seq_rm(self.memory, slot, -1, -1)


def _read_stdin(inbox: queue.Queue[Any]) -> None:
    for line in sys.stdin:
        if line.strip():
            inbox.put(line)
    inbox.put(_EOF)


def _admit(engine: _Engine, line: str, now: float) -> _Seq | dict[str, Any]:
    try:
        request = safe_json.loads_object(line, what="the request")
        seq = _Seq(request["id"], engine.tokenize(str(request["prompt"])), int(request["max_tokens"]), now)
    except (ValueError, KeyError, TypeError) as exc:  # ValueError: JsonError too (malformed, nested, too large)
        return {"id": None, "error": f"bad request: {exc}"}
    if not seq.tokens or seq.max_tokens < 1:
        return {"id": seq.request_id, "error": "empty prompt or max_tokens < 1"}
    if len(seq.tokens) + seq.max_tokens > engine.n_ctx_per_seq:
        return {"id": seq.request_id, "error": f"{len(seq.tokens)} prompt + {seq.max_tokens} output tokens exceed "
                f"the per-sequence context {engine.n_ctx_per_seq}; raise the context size"}  # fmt: skip
    return seq


def serve(engine: _Engine, inbox: queue.Queue[Any]) -> None:
    """The scheduling loop: admit waiting requests into free slots, prefill them, one decode step for all."""
    waiting: list[_Seq] = []
    active: dict[int, _Seq] = {}
    done = False
    while not done or waiting or active:
        block = not (waiting or active) and not done
        while True:
            try:
                line = inbox.get(block=block)
            except queue.Empty:
                break
            block = False
            if line is _EOF:
                done = True
                continue
            admitted = _admit(engine, line, time.perf_counter())
            if isinstance(admitted, dict):
                _say(admitted)
            else:
                waiting.append(admitted)
        free = [slot for slot in range(engine.slots) if slot not in active]
        new = [waiting.pop(0) for _ in free[: len(waiting)]]
        for seq, slot in zip(new, free, strict=False):
            seq.slot, active[slot] = slot, seq
        if new:
            engine.prefill(new)
        running = [s for s in active.values() if s.generated < s.max_tokens]
        if running:
            engine.step(running)
        for s in [s for s in active.values() if s.generated >= s.max_tokens]:
            now = time.perf_counter()
            _say({"id": s.request_id, "tokens": s.generated, "prompt_tokens": len(s.tokens),
                  "ttft_ms": (s.first_token_at - s.prefill_started) * 1000,
                  "latency_ms": (now - s.arrived) * 1000})  # fmt: skip
            engine.free(s.slot)
            del active[s.slot]


def main(argv: list[str]) -> int:
    model_path, settings = argv[0], safe_json.loads_object(argv[1], what="the worker's settings argument")
    _keep_native_prints_off_the_protocol()
    import llama_cpp

    llama_cpp.llama_backend_init()
    model_params = llama_cpp.llama_model_default_params()
    model_params.n_gpu_layers = int(settings.get("n_gpu_layers", 0))
    model = llama_cpp.llama_model_load_from_file(model_path.encode(), model_params)
    if not model:
        _say({"error": f"llama.cpp could not load the model {model_path}"})
        return 1
    try:
        try:
            engine = _Engine(llama_cpp, model, settings)
        except RuntimeError as exc:
            _say({"error": str(exc)})
            return 1
        _say({"ready": {"slots": engine.slots, "n_ctx": llama_cpp.llama_n_ctx(engine.ctx),
                        "n_ctx_per_seq": engine.n_ctx_per_seq, "n_batch": engine.n_batch}})  # fmt: skip
        inbox: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=_read_stdin, args=(inbox,), daemon=True).start()
        try:
            serve(engine, inbox)
        except RuntimeError as exc:
            _say({"error": str(exc)})
            return 1
        finally:
            engine.close()
    finally:
        llama_cpp.llama_model_free(model)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
