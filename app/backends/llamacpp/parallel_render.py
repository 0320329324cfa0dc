"""Prompts for the parallel engine, rendered exactly as the single worker renders them.

The parallel child loads the model once as a ``llama_cpp.Llama`` with a tiny context of its own: its chat handler
renders a chat (the chosen chat format or the GGUF's template, tools shown to it, thinking switches, continuing an
unfinished reply) and it tokenizes and detokenizes; the batched context (``parallel_batch``) is made on the same
loaded weights, so they are in memory once. The chat handler is driven through a stand-in whose
``create_completion`` only records the prompt tokens and the chat format's own stops (nothing is generated here).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.backends.llamacpp import continuation, generation, repack, templates
from app.backends.llamacpp.reply_loop import Stops
from app.backends.llamacpp.tool_calls import tool_call_format
from app.core.chat.formats import choose_chat_format
from app.core.gguf.header import read_gguf_header
from app.core.params import GenerationOptions, LoadParams

RENDER_CTX = 64  # the Llama's own context: it renders and tokenizes only


class Renderer:
    """The loaded model's ``Llama`` (``llm``; its ``model`` pointer is what the batched context runs on)."""

    def __init__(self, path: str, params: LoadParams, n_gpu_layers: int) -> None:
        import llama_cpp

        from app.backends.llamacpp.engine import LlamaEngine

        header = read_gguf_header(path)
        continuation.register_formats()
        choice = choose_chat_format(header.architecture, header.chat_template is not None, params.chat_format)
        small = replace(params, n_ctx=RENDER_CTX, n_batch=RENDER_CTX)
        kwargs = LlamaEngine.llama_kwargs(small, n_gpu_layers, choice.chat_format)
        with templates.tolerant_templates(), repack.model_params_without_repacking(repack.repacking_disabled()):
            self.llm = llama_cpp.Llama(model_path=path, **kwargs)
        in_use = templates.template_in_use(params.chat_format, header.metadata)
        self.tool_format = tool_call_format(in_use[1] if in_use else None, header.architecture)
        self.vocab = self.llm._model.vocab
        self._l = llama_cpp
        self.info = {"path": path, "name": header.name, "architecture": header.architecture,
                     "n_ctx_train": header.context_length, "chat_format": choice.chat_format,
                     "chat_format_reason": choice.reason, "n_gpu_layers": n_gpu_layers,
                     "metadata": {k: str(v)[:2000] for k, v in header.metadata.items()}}  # fmt: skip

    @property
    def model(self) -> Any:
        return self.llm._model.model

    def chat(
        self, messages: list[dict[str, Any]], asked_stops: Any, options: GenerationOptions
    ) -> tuple[list[int], Stops]:
        """The prompt tokens of a chat and the reply's stops (the request's and the chat format's turn end)."""
        llm = self.llm
        handler = templates.variables_handler(llm, options)
        tools = options.prompt_tools
        prompt = generation.prompt_messages(llm, messages, tools, self.tool_format, handler)
        probe = _Capture(llm, handler)
        extra = {"tools": tools, "tool_choice": "auto"} if tools else {}
        continuation.open_chat_stream(probe, prompt, **extra)
        return probe.prompt or [llm.token_bos()], generation.reply_stops(asked_stops, probe.stop, options)

    def completion(self, prompt: str, asked_stops: Any, options: GenerationOptions) -> tuple[list[int], Stops]:
        tokens = self.llm.tokenize(prompt.encode("utf-8"), special=True) or [self.llm.token_bos()]
        return list(tokens), generation.reply_stops(asked_stops, (), options)

    def piece(self, token: int) -> bytes:
        return bytes(self.llm.detokenize([token]))

    def ends(self, token: int) -> bool:
        return bool(self._l.llama_vocab_is_eog(self.vocab, token))


class _Capture(generation.StandIn):
    """The model as the chat handler sees it; its completion records the prompt and the stops, and is empty."""

    def __init__(self, llm: Any, handler: Any) -> None:
        super().__init__(llm, handler)
        self.prompt: list[int] = []
        self.stop: Any = None

    def create_completion(self, prompt: Any, **kwargs: Any) -> Any:
        self.prompt = list(prompt) if not isinstance(prompt, str) else self._llm.tokenize(prompt.encode(), special=True)
        self.stop = kwargs.get("stop")
        return iter(())
