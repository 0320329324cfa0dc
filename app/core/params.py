"""Load and sampling parameters shared by every backend."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

KV_CACHE_TYPES = ("f16", "q8_0", "q4_0")

# GGML_TYPE_* ids used by llama.cpp for the KV cache types we offer.
GGML_TYPE_IDS = {"f16": 1, "q4_0": 2, "q8_0": 8}


@dataclass(frozen=True)
class LoadParams:
    """How a model is loaded. ``n_gpu_layers=None`` means "all layers if the build can offload"."""

    n_ctx: int = 4096
    n_gpu_layers: int | None = None
    n_threads: int | None = None
    n_batch: int = 512
    flash_attn: bool = False
    type_k: str = "f16"
    type_v: str = "f16"
    use_mmap: bool = True
    use_mlock: bool = False
    chat_format: str | None = None
    main_gpu: int = 0
    repeat_last_n: int = 64  # tokens the repeat penalty looks back over (llama.cpp: last_n_tokens_size)
    lora_path: str | None = None  # a GGUF LoRA adapter applied at load
    embedding: bool = False  # load for embeddings only (llama.cpp: a pooled vector per text; no chat)
    mmproj_path: str | None = None  # the vision projector; None: the one found next to the model, if any
    # speculative decoding on llama.cpp: "off", "ngram" (prompt lookup, no second model) or "draft:<GGUF path>"
    speculative: str = "off"
    n_parallel: int | None = None  # sequences decoded at once (llama.cpp); None: chosen from the memory estimate

    def problems(self) -> list[str]:
        """Human-readable reasons this combination cannot load, empty when it can."""
        found = []
        if self.n_ctx < 16:
            found.append("Context size must be at least 16 tokens.")
        for name in ("type_k", "type_v"):
            if getattr(self, name) not in KV_CACHE_TYPES:
                found.append(f"{name} must be one of {', '.join(KV_CACHE_TYPES)}.")
        if self.type_v != "f16" and not self.flash_attn:
            found.append("A quantized V cache needs flash attention: turn on flash attention or use f16 for V.")
        return found

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoadParams:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling options. ``seed=None`` means random; ``max_tokens=None`` fills the context."""

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    max_tokens: int | None = 512
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    typical_p: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        data = dict(vars(self))  # flat: a copy of the fields is all asdict would do, at a tenth of its cost
        data["stop"] = list(self.stop)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        known = _known(cls, data)
        if "stop" in known:
            known["stop"] = tuple(str(s) for s in known["stop"] or ())
        return cls(**known)


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")
REASONING_EFFORTS = ("low", "medium", "high")
TOOL_CHOICE_MODES = ("auto", "none", "required")
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class GenerationOptions:
    """What a request asks beyond sampling, in OpenAI's terms (the API server's options): structured output
    (``response_format``), tools (``tools``, ``tool_choice``, ``parallel_tool_calls``), per-token ``logprobs``
    with ``top_logprobs`` alternatives, and ``grammar`` (raw GBNF, internal: llama.cpp only). The defaults ask
    for nothing. ``check()`` refuses shapes no engine can honour; each engine refuses what it cannot enforce."""

    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None  # None: several calls in auto mode, one when a call is forced
    logprobs: bool = False
    top_logprobs: int | None = None
    grammar: str | None = None
    whole: bool = False  # the caller takes the reply at once (not streamed): a server may send it in one piece
    # SamplingParams fields an API client left unset: a server engine (vLLM) applies its own defaults for them
    server_defaults: tuple[str, ...] = ()
    # thinking models: on/off and effort, where the chat template offers them (None: the template's default)
    enable_thinking: bool | None = None
    reasoning_effort: str | None = None
    # a raw completion's prompt sent back as the reply's first piece, with its tokens' logprobs when ``logprobs``
    echo: bool = False
    # the stop strings are the client's own: obeyed wherever they match (else, as a preset's, only once the reply
    # has visible text: a stop the model writes before its first word does not end the reply)
    exact_stops: bool = False

    # --- what is asked, in short ------------------------------------------------------------------------
    @property
    def format_type(self) -> str:
        """``text``, ``json_object`` or ``json_schema``."""
        return str((self.response_format or {}).get("type") or "text")

    @property
    def json_schema(self) -> dict[str, Any] | None:
        """The schema of a ``json_schema`` response format, else None."""
        if self.format_type != "json_schema":
            return None
        schema = ((self.response_format or {}).get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, dict) else None

    @property
    def tool_mode(self) -> str:
        """``none`` (no tools, or told not to call one), ``auto``, ``required`` or ``named``."""
        if not self.tools or self.tool_choice == "none":
            return "none"
        if isinstance(self.tool_choice, dict):
            return "named"
        return str(self.tool_choice or "auto")

    @property
    def named_tool(self) -> str | None:
        if isinstance(self.tool_choice, dict):
            name = (self.tool_choice.get("function") or {}).get("name")
            return str(name) if name else None
        return None

    @property
    def parallel_calls(self) -> bool:
        """Whether a reply may hold several tool calls: as asked, else in auto mode only (a forced call is one)."""
        if self.parallel_tool_calls is not None:
            return self.parallel_tool_calls
        return self.tool_mode not in ("required", "named")

    @property
    def prompt_tools(self) -> list[dict[str, Any]] | None:
        """The tools the model is shown: none when it must not call one (OpenAI's ``tool_choice: none``)."""
        return self.tools if self.tool_mode != "none" else None

    def tool_names(self) -> list[str]:
        return [str(t["function"]["name"]) for t in self.tools or [] if _is_function_tool(t)]

    # --- validation ---------------------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """What is malformed, in words a client can act on; empty when the options make sense."""
        found = self._format_problems() + self._tool_problems()
        if self.top_logprobs is not None:
            if not isinstance(self.top_logprobs, int) or not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
                found.append(f"top_logprobs must be a whole number from 0 to {MAX_TOP_LOGPROBS}.")
            elif not self.logprobs:
                found.append("top_logprobs needs logprobs set to true.")
        if self.grammar is not None and (self.format_type != "text" or self.tool_mode in ("required", "named")):
            found.append("Give either a grammar or a JSON response format / forced tool call, not both.")
        if self.reasoning_effort is not None and self.reasoning_effort not in REASONING_EFFORTS:
            found.append(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}.")
        if self.enable_thinking is not None and not isinstance(self.enable_thinking, bool):
            found.append("enable_thinking must be true or false.")
        return found

    def check(self) -> None:
        """Raise InvalidInputError naming every problem (see ``problems``)."""
        from app.core.errors import InvalidInputError

        if found := self.problems():
            raise InvalidInputError(" ".join(found))

    def _format_problems(self) -> list[str]:
        fmt = self.response_format
        if fmt is None:
            return []
        if not isinstance(fmt, dict) or fmt.get("type") not in RESPONSE_FORMAT_TYPES:
            return [f"response_format.type must be one of {', '.join(RESPONSE_FORMAT_TYPES)}."]
        if fmt["type"] == "json_schema" and self.json_schema is None:
            return ["response_format json_schema needs json_schema.schema: a JSON Schema object."]
        return []

    def _tool_problems(self) -> list[str]:
        found = []
        if self.tools is not None:
            if not isinstance(self.tools, list) or not all(_is_function_tool(t) for t in self.tools):
                return ['tools must be a list of {"type": "function", "function": {"name": ..., "parameters": {...}}}.']
            names = self.tool_names()
            if len(set(names)) != len(names):
                found.append("Each tool needs its own name; two tools share one.")
            if any(not isinstance(t["function"].get("parameters", {}), dict) for t in self.tools):
                found.append("A tool's parameters must be a JSON Schema object.")
        choice = self.tool_choice
        if isinstance(choice, dict):
            if choice.get("type") != "function" or not self.named_tool:
                found.append('tool_choice must be "auto", "none", "required" or {"type": "function", "function": '
                             '{"name": ...}}.')  # fmt: skip
            elif self.named_tool not in self.tool_names():
                found.append(f"tool_choice names the function '{self.named_tool}', which is not among the tools.")
        elif choice is not None and choice not in TOOL_CHOICE_MODES:
            found.append('tool_choice must be "auto", "none", "required" or a named function.')
        elif choice == "required" and not self.tools:
            found.append('tool_choice "required" needs tools.')
        return found

    # --- transport ----------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GenerationOptions:
        return cls(**_known(cls, data))


def _is_function_tool(tool: Any) -> bool:
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        return False
    function = tool.get("function")
    return isinstance(function, dict) and isinstance(function.get("name"), str) and bool(function["name"])
