"""llama-cpp-python driven inside the worker process: load, stream a chat reply, report KV usage.

Only the worker imports this module; ``llama_cpp`` is imported on first use.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from app.backends.llamacpp import continuation, generation, grammars, repack, speculation, templates, vision
from app.backends.llamacpp.logprobs import LogprobRecorder
from app.backends.llamacpp.protocol import (
    ERR_BAD_INPUT,
    ERR_GENERATION,
    ERR_LOAD,
    ERR_PROMPT_TOO_LONG,
    ERR_TEMPLATE,
)
from app.backends.llamacpp.reply_loop import ReplyLoop
from app.backends.llamacpp.tool_calls import ToolCallFormat, tool_call_format
from app.core.chat.formats import choose_chat_format
from app.core.chat.prompt_errors import prompt_too_long_message
from app.core.gguf.header import GgufFileError, GgufHeader, read_gguf_header
from app.core.load_checks import memory_refusal
from app.core.memory.fit import MachineMemory
from app.core.params import GGML_TYPE_IDS, GenerationOptions, LoadParams, SamplingParams
from app.core.speculative import parse_speculative

_TOO_LONG = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")
_TOO_LONG_TO_EMBED = re.compile(r"Requested tokens \((\d+)\) exceed batch size of (\d+)")
EMBEDDING_ONLY = (
    "This model was loaded for embeddings only, so it cannot write replies. Load it again without the "
    "embedding option to chat with it."
)
NOT_FOR_EMBEDDING = "This model was loaded for chat. Load it again with the embedding option to embed text."
Emit = Callable[[str, list[dict[str, Any]] | None], None]  # a text piece, and its tokens' logprobs if asked


class EngineError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class TokenCounter:
    """Counts what llama.cpp's generate loop produced for one request."""

    prompt_tokens: int = 0
    cached_tokens: int = 0  # of the prompt, found in the context from the last request (llama.cpp keeps the prefix)
    sampled: int = 0
    last_token: int | None = None
    first_token_at: float | None = None
    tokens: list[int] = field(default_factory=list)  # the prompt's, then those sampled (drafts are settled on them)


class LlamaEngine:
    """Owns one loaded ``llama_cpp.Llama``; not thread-safe, the worker's main thread drives it."""

    def __init__(self) -> None:
        self.llm: Any = None
        self.info: dict[str, Any] = {}
        self.counter = TokenCounter()
        self._abort = threading.Event()
        self._abort_cb: Any = None
        self.embedding = False  # loaded for embeddings only
        self._tool_format: ToolCallFormat = tool_call_format(None)
        self.speculation: speculation.Speculation | None = None
        self.speculate_next = True  # False: the next reply runs without speculation (a measurement without it)

    def load(self, path: str, params: LoadParams) -> dict[str, Any]:
        problems = params.problems()
        if problems:
            raise EngineError(ERR_LOAD, " ".join(problems))
        try:
            header = read_gguf_header(path)
        except GgufFileError as exc:
            raise EngineError(ERR_LOAD, str(exc)) from exc
        import llama_cpp

        continuation.register_formats()
        offload = bool(llama_cpp.llama_supports_gpu_offload())
        self._check_request(header, params, offload)
        self.unload()
        choice = choose_chat_format(header.architecture, header.chat_template is not None, params.chat_format)
        n_gpu_layers = params.n_gpu_layers if params.n_gpu_layers is not None else (-1 if offload else 0)
        started = time.perf_counter()
        self.llm = self._create(path, header, params, n_gpu_layers, choice.chat_format)
        seeing = self._attach_projector(path, header, params, offload and n_gpu_layers != 0)
        self.embedding = params.embedding
        in_use = templates.template_in_use(params.chat_format, header.metadata)  # None: a built-in chat format
        self._tool_format = tool_call_format(in_use[1] if in_use else None, header.architecture)
        self._install_counter()
        self._install_abort()
        self._attach_speculation(path, params, n_gpu_layers, bool(seeing.get("vision")))
        self.info = {
            "path": path,
            "name": header.name,
            "architecture": header.architecture,
            "n_ctx": int(self.llm.n_ctx()),
            "n_ctx_train": header.context_length,
            "n_gpu_layers": n_gpu_layers if offload else 0,
            "chat_format": choice.chat_format,
            "chat_format_reason": choice.reason,
            "load_seconds": time.perf_counter() - started,
            "gpu_offload_supported": offload,
            "metadata": {k: str(v)[:2000] for k, v in header.metadata.items()},
            **seeing,
        }
        return self.info

    def _attach_projector(self, path: str, header: GgufHeader, params: LoadParams, use_gpu: bool) -> dict[str, Any]:
        """The vision projector paired with the model, loaded now; a projector that fails fails the load."""
        if params.embedding:
            return {"vision": False, "projector": None, "projector_problem": None}
        try:
            return vision.attach(self.llm, path, header, params.mmproj_path, use_gpu)
        except vision.ProjectorLoadError as exc:
            self.unload()
            raise EngineError(ERR_LOAD, str(exc)) from exc

    def _attach_speculation(self, path: str, params: LoadParams, n_gpu_layers: int, vision: bool) -> None:
        """Speculative decoding as ``params`` asks; none for embeddings or a model that reads images (its prompt
        is evaluated by the projector's own loop). A draft model that fails to load fails the load."""
        setting = parse_speculative(params.speculative)
        if not setting.on or params.embedding or vision:
            return
        draft_kwargs = self.llama_kwargs(params, n_gpu_layers, None)
        draft_kwargs.pop("lora_path", None)
        try:
            self.speculation = speculation.attach(self.llm, setting, draft_kwargs)
        except Exception as exc:  # the draft model's load failure, in words
            self.unload()
            name = os.path.basename(str(setting.draft_path))
            raise EngineError(ERR_LOAD, f"llama.cpp could not load the draft model {name}: {exc}.") from exc

    @staticmethod
    def _check_request(header: GgufHeader, params: LoadParams, offload: bool) -> None:
        """Refuse, before anything is unloaded, what cannot work: an unknown chat format, a chat template that
        does not compile or that the sandbox blocks, and (on a build without GPU offload, where everything
        lives in RAM) a context that will not fit this machine's memory."""
        if params.chat_format is not None:
            known = templates.chat_formats(header.metadata)
            if params.chat_format not in known:
                raise EngineError(ERR_BAD_INPUT, templates.unknown_format_message(params.chat_format, known))
        in_use = templates.template_in_use(params.chat_format, header.metadata)
        if in_use is not None and (problem := templates.template_problem(*in_use)) is not None:
            raise EngineError(ERR_TEMPLATE, problem)
        try:
            setting = parse_speculative(params.speculative)
        except ValueError as exc:
            raise EngineError(ERR_BAD_INPUT, str(exc)) from exc
        if (refusal := speculation.draft_refusal(setting, str(header.path))) is not None:
            raise EngineError(ERR_BAD_INPUT, refusal)
        if not offload and (refusal := memory_refusal(header, params, ram_only_machine())) is not None:
            raise EngineError(ERR_BAD_INPUT, refusal)

    def _create(
        self, path: str, header: GgufHeader, params: LoadParams, n_gpu_layers: int, chat_format: str | None
    ) -> Any:
        import llama_cpp

        kwargs = self.llama_kwargs(params, n_gpu_layers, chat_format)
        if params.embedding:
            kwargs.update(_embedding_kwargs(header, params))
        elif parse_speculative(params.speculative).on:  # verification is then bit-identical to one-at-a-time decoding
            kwargs.update(speculation.LOAD_KWARGS)
        try:
            with templates.tolerant_templates(), repack.model_params_without_repacking(repack.repacking_disabled()):
                return llama_cpp.Llama(model_path=path, **kwargs)
        except Exception as exc:  # every failure becomes a readable load error
            if (words := templates.describe_template_error(exc)) is not None:
                raise EngineError(ERR_TEMPLATE, words) from exc
            raise EngineError(ERR_LOAD, _load_failure_message(path, header.architecture, params.n_ctx, exc)) from exc

    @staticmethod
    def llama_kwargs(params: LoadParams, n_gpu_layers: int, chat_format: str | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "n_ctx": params.n_ctx,
            "n_batch": params.n_batch,
            "n_gpu_layers": n_gpu_layers,
            "flash_attn": params.flash_attn,
            "use_mmap": params.use_mmap,
            "use_mlock": params.use_mlock,
            "verbose": False,
            "chat_format": chat_format,
            "main_gpu": params.main_gpu,
            "last_n_tokens_size": params.repeat_last_n,
        }
        if params.n_threads:
            kwargs["n_threads"] = params.n_threads
        if params.lora_path:
            kwargs["lora_path"] = params.lora_path
        if params.type_k != "f16":
            kwargs["type_k"] = GGML_TYPE_IDS[params.type_k]
        if params.type_v != "f16":
            kwargs["type_v"] = GGML_TYPE_IDS[params.type_v]
        return kwargs

    def _install_counter(self) -> None:
        """Wrap this instance's ``generate`` to count prompt and sampled tokens exactly."""
        original = self.llm.generate
        self.counter = TokenCounter()

        def counting_generate(tokens: list[int], *args: Any, **kwargs: Any) -> Iterator[int]:
            counter = self.counter
            counter.prompt_tokens = len(tokens)
            counter.cached_tokens = _kept_prefix(self.llm, tokens)
            counter.tokens = list(tokens)
            for token in original(tokens, *args, **kwargs):
                if self._abort.is_set():  # Stop: end at this token, before it is counted or decoded
                    return
                if counter.first_token_at is None:
                    counter.first_token_at = time.perf_counter()
                counter.sampled += 1
                counter.last_token = token
                counter.tokens.append(token)
                yield token

        self.llm.generate = counting_generate

    def _install_abort(self) -> None:
        """Let Stop interrupt a long prompt evaluation, not only the token loop."""
        import llama_cpp

        def should_abort(_data: Any) -> bool:
            return self._abort.is_set()

        self._abort_cb = llama_cpp.ggml_abort_callback(should_abort)
        llama_cpp.llama_set_abort_callback(self.llm._ctx.ctx, self._abort_cb, None)

    def request_stop(self) -> None:
        self._abort.set()

    def stream_chat(
        self, messages: list[dict[str, Any]], sampling: SamplingParams, options: GenerationOptions, emit: Emit
    ) -> dict[str, Any]:
        """Generate a reply, calling ``emit`` with each text piece; returns counts and the finish reason."""
        llm = self._generating_model()
        self._check_images(messages)
        return self._generate(
            lambda loop: generation.open_chat(
                llm, messages, sampling_kwargs(sampling), options, self._tool_format, loop
            ),
            options,
            emit,
        )

    def stream_completion(
        self, prompt: str, sampling: SamplingParams, options: GenerationOptions, emit: Emit
    ) -> dict[str, Any]:
        """Continue ``prompt`` as raw text (no chat template), as ``stream_chat`` does a chat."""
        llm = self._generating_model()
        return self._generate(
            lambda loop: generation.open_completion(
                llm, prompt, sampling_kwargs(sampling), options, self._tool_format, loop
            ),
            options,
            emit,
        )

    def count_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        """The prompt tokens of this chat as the chat template renders it (tools included)."""
        llm = self._generating_model()
        self._check_images(messages)
        try:
            return generation.count_chat_tokens(llm, messages, tools, self._tool_format)
        except Exception as exc:
            raise self._translate(exc) from exc

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One normalized vector per text (a model loaded with ``embedding``)."""
        if self.llm is None:
            raise EngineError(ERR_GENERATION, "No model is loaded. Load a model first.")
        if not self.embedding:
            raise EngineError(ERR_BAD_INPUT, NOT_FOR_EMBEDDING)
        self._abort.clear()  # a Stop meant for an earlier reply must not abort this
        try:
            return [list(map(float, vector)) for vector in self.llm.embed(texts, normalize=True, truncate=False)]
        except ValueError as exc:
            if match := _TOO_LONG_TO_EMBED.search(str(exc)):
                raise EngineError(
                    ERR_PROMPT_TOO_LONG,
                    f"A text to embed has {int(match[1]):,} tokens; this model takes {int(match[2]):,} at most as "
                    "loaded. Split the text, or load the model with a larger context.",
                ) from exc
            raise self._translate(exc) from exc

    def _check_images(self, messages: list[dict[str, Any]]) -> None:
        if not self.info.get("vision") and vision.has_images(messages):
            raise EngineError(ERR_BAD_INPUT, vision.NO_VISION)

    def _generating_model(self) -> Any:
        if self.llm is None:
            raise EngineError(ERR_GENERATION, "No model is loaded. Load a model first.")
        if self.embedding:
            raise EngineError(ERR_BAD_INPUT, EMBEDDING_ONLY)
        return self.llm

    def _generate(
        self, open_stream: Callable[[ReplyLoop], Iterator[dict[str, Any]]], options: GenerationOptions, emit: Emit
    ) -> dict[str, Any]:
        """Drive a chunk stream (made by the app's token loop) to its end or Stop, emitting text with its logprobs
        when asked; the counts, the finish reason and the stop string that matched."""
        self._abort.clear()
        self.counter = TokenCounter()
        recorder = LogprobRecorder(self.llm, options.top_logprobs or 0) if options.logprobs else None
        loop = ReplyLoop(self.llm, recorder)
        stream = None
        speculating = self._begin_speculation()
        try:
            stream = open_stream(loop)
            for chunk in stream:
                choice = chunk["choices"][0]
                text = choice["text"] if "text" in choice else choice["delta"].get("content")
                if text:
                    emit(text, loop.take_logprobs())
                if self._abort.is_set():
                    break
        except Exception as exc:  # every failure becomes a readable error event
            if not (isinstance(exc, RuntimeError) and self._abort.is_set()):
                raise self._translate(exc) from exc
        finally:
            if stream is not None and hasattr(stream, "close"):
                stream.close()
            self._end_speculation()
        spec = self._speculation_counts(speculating)
        if self._abort.is_set():
            return {**self._reply_counts("stopped", None), **spec}
        return {**self._reply_counts(loop.finish_reason, loop.stop_sequence), **spec}

    @property
    def speculative_mode(self) -> str:
        """The speculative decoding in use: "off", "ngram" or "draft"."""
        return self.speculation.mode if self.speculation is not None else "off"

    def _begin_speculation(self) -> bool:
        """Whether this reply speculates: the model has a drafter and this reply was not asked to go without."""
        asked, self.speculate_next = self.speculate_next, True
        if self.speculation is None:
            return False
        self.speculation.drafts.begin_reply()
        self.llm.draft_model = self.speculation.drafts if asked else None
        return asked

    def _end_speculation(self) -> None:
        if self.speculation is not None and self.llm is not None:
            self.llm.draft_model = self.speculation.drafts

    def _speculation_counts(self, speculating: bool) -> dict[str, Any]:
        if not speculating or self.speculation is None:
            return {"spec_mode": None, "spec_drafted": 0, "spec_accepted": 0}
        drafts = self.speculation.drafts
        drafts.settle(self.counter.tokens)
        return {"spec_mode": self.speculation.mode, "spec_drafted": drafts.drafted, "spec_accepted": drafts.accepted}

    def _translate(self, exc: Exception) -> EngineError:
        if (words := templates.describe_template_error(exc)) is not None:
            return EngineError(ERR_TEMPLATE, words)
        if isinstance(exc, continuation.ContinuationError | grammars.GrammarError | vision.ImageInputError):
            return EngineError(ERR_BAD_INPUT, str(exc))
        match = _TOO_LONG.search(str(exc))
        if match:
            return EngineError(ERR_PROMPT_TOO_LONG, prompt_too_long_message(int(match[1]), int(match[2])))
        if isinstance(exc, ValueError):
            return EngineError(ERR_GENERATION, f"llama.cpp rejected the request: {exc}")
        return EngineError(ERR_GENERATION, f"llama.cpp failed while generating: {type(exc).__name__}: {exc}")

    def _reply_counts(self, finish_reason: str | None, stop_sequence: str | None) -> dict[str, Any]:
        import llama_cpp

        counter = self.counter
        completion = counter.sampled
        last = counter.last_token
        if last is not None and llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, last):
            completion -= 1
        return {
            "prompt_tokens": counter.prompt_tokens,
            "cached_tokens": counter.cached_tokens,
            "completion_tokens": max(completion, 0),
            "finish_reason": finish_reason or "stop",
            "stop_sequence": stop_sequence,
            "kv": self.kv_usage(),
        }

    def context_tokens(self) -> int:
        """Tokens in the context right now (prompt + generated so far): a cheap live KV figure."""
        return int(self.llm.n_tokens) if self.llm is not None else 0

    def kv_usage(self) -> dict[str, int] | None:
        if self.llm is None:
            return None
        import llama_cpp

        memory = llama_cpp.llama_get_memory(self.llm._ctx.ctx)
        used = int(llama_cpp.llama_memory_seq_pos_max(memory, 0)) + 1
        return {"used_cells": max(used, 0), "total_cells": int(self.llm.n_ctx())}

    def unload(self) -> None:
        if self.speculation is not None:
            self.speculation.close()
            self.speculation = None
        if self.llm is not None:
            self.llm.close()
            self.llm = None
            self.info = {}


def sampling_kwargs(sampling: SamplingParams) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "min_p": sampling.min_p,
        "repeat_penalty": sampling.repeat_penalty,
        "max_tokens": sampling.max_tokens,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        "typical_p": sampling.typical_p,
    }
    if sampling.stop:
        kwargs["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        kwargs["seed"] = sampling.seed
    return kwargs


def _embedding_kwargs(header: GgufHeader, params: LoadParams) -> dict[str, Any]:
    """A context that embeds whole texts (up to the context size) into one vector each: the model's own pooling,
    or mean pooling when it has none (a chat model loaded for embeddings)."""
    import llama_cpp

    pooling = header.metadata.get(f"{header.architecture}.pooling_type")
    pooled = isinstance(pooling, int) and pooling > 0
    return {
        "embedding": True,
        "n_batch": params.n_ctx,
        "n_ubatch": params.n_ctx,
        "pooling_type": llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED if pooled else llama_cpp.LLAMA_POOLING_TYPE_MEAN,
    }


def _load_failure_message(path: str, architecture: str | None, n_ctx: int, exc: Exception) -> str:
    name = os.path.basename(path)
    if "llama_context" in str(exc):  # the model loaded; its context (KV cache, compute buffers) did not
        return (
            f"llama.cpp loaded {name} but could not create a context of {n_ctx:,} tokens: {exc}. "
            "Lower the context size (or use a q8_0 KV cache); the log has llama.cpp's own message."
        )
    if architecture:
        return (
            f"llama.cpp could not load {name} (architecture '{architecture}'): {exc}. "
            "If this build does not support that architecture, update llama-cpp-python or choose another model; "
            "the log has llama.cpp's own message."
        )
    return f"llama.cpp could not load {name}: {exc}. The log has llama.cpp's own message."


def ram_only_machine() -> MachineMemory:
    """This machine as a build without GPU offload sees it: everything in system RAM."""
    import psutil

    from app.backends.llamacpp.cpu_features import llama_cpp_uses_amx

    ram = psutil.virtual_memory()
    reason = "this llama.cpp build cannot offload"
    return MachineMemory((), (), (), int(ram.total), int(ram.available), reason, cpu_amx=llama_cpp_uses_amx())


def _kept_prefix(llm: Any, tokens: list[int]) -> int:
    """The prompt tokens ``Llama.generate`` will not evaluate again: its common prefix with the context's tokens
    (llama-cpp-python compares all but the prompt's last token, which it always evaluates)."""
    kept = 0
    for had, wanted in zip(llm._input_ids[: llm.n_tokens], tokens[:-1], strict=False):
        if had != wanted:
            break
        kept += 1
    return kept
