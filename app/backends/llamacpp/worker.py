"""The llama.cpp worker process: ``python -m app.backends.llamacpp.worker``.

It speaks JSON lines: commands on stdin, events on the original stdout. Anything native code prints
to stdout is sent to stderr instead, so it cannot corrupt the protocol. When stdin closes (the app
died or quit) the worker exits.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import traceback
from typing import Any, BinaryIO

from app.backends.llamacpp import protocol
from app.core.params import GenerationOptions, LoadParams, SamplingParams


class Worker:
    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._out_lock = threading.Lock()
        self._commands: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._active_chat: int | None = None  # the id Stop must name
        from app.backends.llamacpp.engine import LlamaEngine

        self.engine = LlamaEngine()

    def send(self, message: dict[str, Any]) -> None:
        with self._out_lock:
            self._out.write(protocol.encode(message))
            self._out.flush()

    def read_commands(self, stdin: BinaryIO) -> None:
        """Runs on its own thread so Stop is seen while the main thread generates."""
        for line in stdin:
            try:
                command = protocol.decode(line, what="a command to the llama.cpp worker")
            except ValueError as exc:  # safe_json.JsonError: malformed, nested too deeply, too large
                self.send({"event": "error", "id": None, "kind": protocol.ERR_BAD_COMMAND, "message": str(exc)})
                continue
            if command.get("op") == "stop":
                if command.get("id") == self._active_chat:
                    self.engine.request_stop()
                continue
            self._commands.put(command)
        self.engine.request_stop()
        self._commands.put(None)

    def run(self) -> None:
        import llama_cpp

        self.send({"event": "hello", "pid": os.getpid(), "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload())})
        while (command := self._commands.get()) is not None:
            if command.get("op") == "shutdown":
                break
            self._handle(command)
        self.engine.unload()

    def _handle(self, command: dict[str, Any]) -> None:
        """Run one command; every failure becomes an error event and the worker stays up for the next one."""
        from app.backends.llamacpp.engine import EngineError

        op, request_id = command.get("op"), command.get("id")
        try:
            if op == "load":
                info = self.engine.load(command["path"], LoadParams.from_dict(command.get("params", {})))
                self.send(
                    {"event": "loaded", "id": request_id, "info": info, "speculative": self.engine.speculative_mode}
                )
            elif op in ("chat", "complete"):
                self._generate(request_id, command)
            elif op == "embed":
                self._embed(request_id, command)
            elif op == "count":
                self._count(request_id, command)
            elif op == "unload":
                self.engine.unload()
                self.send({"event": "unloaded", "id": request_id})
            else:
                raise EngineError(protocol.ERR_BAD_COMMAND, f"unknown command {op!r}")
        except EngineError as exc:
            self._send_error(request_id, exc.kind, str(exc))
        except Exception as exc:  # a bug or unforeseen library error must not end the worker
            traceback.print_exc(file=sys.stderr)  # the app logs the worker's stderr
            kinds = {"load": protocol.ERR_LOAD, "chat": protocol.ERR_GENERATION, "complete": protocol.ERR_GENERATION}
            kind = kinds.get(str(op), protocol.ERR_BAD_COMMAND)
            self._send_error(request_id, kind, f"The llama.cpp worker failed ({op}): {type(exc).__name__}: {exc}")

    def _send_error(self, request_id: Any, kind: str, message: str) -> None:
        # ``loaded`` tells the app whether a model is still loaded (a refused load keeps the previous one)
        loaded = self.engine.llm is not None
        self.send({"event": "error", "id": request_id, "kind": kind, "message": message, "loaded": loaded})

    def _generate(self, request_id: int | None, command: dict[str, Any]) -> None:
        """A chat (``messages``) or a raw completion (``prompt``), streamed as delta events, then done."""
        from app.backends.llamacpp.engine import EngineError

        sampling = SamplingParams.from_dict(command.get("sampling") or {})
        options = GenerationOptions.from_dict(command.get("options") or {})
        if problems := options.problems():
            raise EngineError(protocol.ERR_BAD_INPUT, " ".join(problems))
        if command["op"] == "chat" and not _valid_messages(command.get("messages")):
            raise EngineError(protocol.ERR_BAD_COMMAND, "a chat needs messages: a list of objects, each with a role")
        if command["op"] == "complete" and not isinstance(command.get("prompt"), str):
            raise EngineError(protocol.ERR_BAD_COMMAND, "a completion needs a prompt: a string")
        self._active_chat = request_id
        self.engine.speculate_next = bool(command.get("speculate", True))
        try:
            if command["op"] == "chat":
                result = self.engine.stream_chat(command["messages"], sampling, options, self._delta_sender(request_id))
            elif options.echo:  # the prompt back first, with its tokens' logprobs when asked
                from app.backends.llamacpp.prompt_logprobs import echo_completion

                result = echo_completion(
                    self.engine, command["prompt"], sampling, options, self._delta_sender(request_id)
                )
            else:
                result = self.engine.stream_completion(
                    command["prompt"], sampling, options, self._delta_sender(request_id)
                )
        finally:
            self._active_chat = None
        self.send({"event": "done", "id": request_id, "generated": self.engine.counter.sampled, **result})

    def _delta_sender(self, request_id: int | None) -> Any:
        def send_delta(text: str, logprobs: list[dict[str, Any]] | None) -> None:
            event: dict[str, Any] = {
                "event": "delta",
                "id": request_id,
                "text": text,
                "kv_used": self.engine.context_tokens(),
                "generated": self.engine.counter.sampled,  # tokens sampled so far in this reply
            }
            if logprobs is not None:
                event["logprobs"] = logprobs
            self.send(event)

        return send_delta

    def _embed(self, request_id: int | None, command: dict[str, Any]) -> None:
        from app.backends.llamacpp.engine import EngineError

        texts = command.get("texts")
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise EngineError(protocol.ERR_BAD_COMMAND, "embed needs texts: a non-empty list of strings")
        from app.backends.llamacpp import chat_embeddings  # a chat load embeds too, on its own context

        self.send({"event": "embedded", "id": request_id, **chat_embeddings.embed(self.engine, texts)})

    def _count(self, request_id: int | None, command: dict[str, Any]) -> None:
        from app.backends.llamacpp.engine import EngineError

        if not _valid_messages(command.get("messages")):
            raise EngineError(protocol.ERR_BAD_COMMAND, "count needs messages: a list of objects, each with a role")
        tools = command.get("tools") or None
        if problems := GenerationOptions(tools=tools).problems():
            raise EngineError(protocol.ERR_BAD_INPUT, " ".join(problems))
        self.send(
            {"event": "counted", "id": request_id, "tokens": self.engine.count_tokens(command["messages"], tools)}
        )


def _valid_messages(messages: Any) -> bool:
    """The shape the chat template iterates over (content may be text, parts or absent: the template decides)."""
    return isinstance(messages, list) and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)


def main() -> None:
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # native prints go to stderr, not into the protocol
    worker = Worker(out)
    threading.Thread(target=worker.read_commands, args=(sys.stdin.buffer,), daemon=True).start()
    worker.run()


if __name__ == "__main__":
    main()
