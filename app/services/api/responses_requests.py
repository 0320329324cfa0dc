"""OpenAI Responses request bodies (``POST /v1/responses``) read into what the engines take: ``tools`` and
``tool_choice`` (read in ``responses_tools``: function, custom and namespace tools; built-in ones are not shown to the
model), ``text.format`` as the structured output chat completions'
``response_format`` asks for, ``reasoning`` as the thinking switches, ``max_output_tokens`` and sampling — and the
fields the response object repeats. What the server cannot honour (a forced built-in tool, background runs,
conversations, stored prompts, compaction) is refused with the reason.

``include``: ``message.output_text.logprobs`` adds the logprobs; the other values name outputs this server never
makes (built-in tools' results; ``reasoning.encrypted_content``: the reasoning comes as text, which a stateless client
such as Codex sends back with the item), so they add nothing.
``truncation: "auto"`` is taken as ``"disabled"``: a conversation the context cannot hold is refused (with the figure),
never cut. ``metadata``, ``user``, ``safety_identifier`` and ``prompt_cache_key`` are repeated in the response;
``client_metadata`` (Codex's) and ``prompt_cache_retention`` are accepted and change nothing."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from app.core.params import MAX_TOP_LOGPROBS, GenerationOptions
from app.services.api.errors import bad_request
from app.services.api.fields import Fields, GenerationCall, sampling_fields
from app.services.api.responses_items import conversation, input_items
from app.services.api.responses_tools import ToolSet, read_tool_choice, read_tools

LOGPROBS_INCLUDE = "message.output_text.logprobs"
EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}


@dataclass
class ResponsesAsk:
    """One create request: ``call`` (its messages come from ``messages``), this request's input ``items`` (stored
    with the response), and ``echo``: the request's fields as the response object repeats them."""

    call: GenerationCall
    instructions: str | None
    items: list[dict[str, Any]]
    previous_response_id: str | None
    store: bool
    logprobs: bool
    echo: dict[str, Any] = field(default_factory=dict)
    tools: ToolSet = field(default_factory=ToolSet)

    def messages(self, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The chat messages: the instructions, then ``history`` (the earlier responses' items), then the input."""
        return conversation(self.instructions, history + self.items)


def responses_ask(body: dict[str, Any], max_tokens_limit: int) -> ResponsesAsk:
    f = Fields(body)
    model = f.text("model", required=True) or ""
    _refuse_what_runs_elsewhere(f)
    sampling = sampling_fields(f)
    if (limit := f.max_tokens(("max_output_tokens",), max_tokens_limit)) is not None:
        sampling["max_tokens"] = limit
    tools = read_tools(body.get("tools"))
    choice, chosen_tools = read_tool_choice(body.get("tool_choice"), tools)
    parallel = f.boolean("parallel_tool_calls")
    logprobs, top = _logprobs(f)
    text = _text(f.obj("text"))
    reasoning = _reasoning(f.obj("reasoning"))
    # ``grammar``: llama-server's extension (a raw GBNF grammar, llama.cpp only), as chat completions take it
    options = GenerationOptions(
        response_format=_response_format(text), tools=chosen_tools or None, tool_choice=choice, logprobs=logprobs,
        top_logprobs=top, grammar=f.text("grammar"), **_thinking_switches(reasoning),
    )  # fmt: skip
    if parallel is not None:  # unset: the server's default (one call when a tool is forced)
        options = replace(options, parallel_tool_calls=parallel)
    if found := options.problems():
        said = " ".join(found)
        raise bad_request(said, param="grammar" if "grammar" in said else "tools" if "tool" in said else "text.format")
    instructions = f.text("instructions")
    call = GenerationCall(model, sampling=sampling, options=options, stream=bool(f.boolean("stream")),
                          keep_alive=f.keep_alive())  # fmt: skip
    store = f.boolean("store") is not False
    echo = {
        "instructions": instructions, "max_output_tokens": sampling.get("max_tokens"),
        "metadata": _metadata(f), "parallel_tool_calls": parallel is not False,
        "previous_response_id": f.text("previous_response_id"), "reasoning": reasoning, "store": store,
        "temperature": sampling.get("temperature"), "text": text, "tool_choice": _echo_choice(body.get("tool_choice")),
        "tools": tools.echo, "top_logprobs": top, "top_p": sampling.get("top_p"), "truncation": _truncation(f),
        "user": f.text("user"), "max_tool_calls": f.integer("max_tool_calls", 1),
        "safety_identifier": f.text("safety_identifier"), "prompt_cache_key": f.text("prompt_cache_key"),
    }  # fmt: skip
    return ResponsesAsk(call, instructions, input_items(body.get("input")), echo["previous_response_id"], store,
                        logprobs, echo, tools)  # fmt: skip


def _refuse_what_runs_elsewhere(f: Fields) -> None:
    if f.boolean("background"):
        raise bad_request("'background' responses are not supported here: send the request and wait for it, or "
                          "stream it.", param="background")  # fmt: skip
    f.refuse("conversation", "conversations are not stored here; continue a stored response with "
                             "'previous_response_id', or send the whole conversation as 'input'.")  # fmt: skip
    f.refuse("prompt", "stored prompt templates live on OpenAI's platform; send 'instructions' and 'input'.")
    f.refuse("context_management", "the server does not compact conversations; send a shorter 'input'.")


def _echo_choice(value: Any) -> Any:
    return "auto" if value is None else value


# --- text format, reasoning, logprobs ---------------------------------------------------------------------------
def _text(value: dict[str, Any] | None) -> dict[str, Any]:
    """``text`` as the response repeats it: ``{"format": {...}, "verbosity"?}``, the format checked."""
    value = value or {}
    fmt = value.get("format") or {"type": "text"}
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "json_schema":
        if isinstance(fmt.get("json_schema"), dict):
            raise bad_request("'text.format' is in Chat Completions' shape; the Responses API takes it flat: "
                              '{"type": "json_schema", "name": ..., "schema": {...}, "strict": true}.',
                              param="text.format")  # fmt: skip
        if not isinstance(fmt.get("schema"), dict):
            raise bad_request("'text.format.schema' must be a JSON Schema object.", param="text.format.schema")
        if not isinstance(fmt.get("name"), str) or not fmt["name"]:
            raise bad_request("'text.format.name' is required: a name for the schema.", param="text.format.name")
    elif kind not in ("text", "json_object"):
        raise bad_request('\'text.format.type\' must be "text", "json_object" or "json_schema".', param="text.format")
    verbosity = value.get("verbosity")
    if verbosity not in (None, "low", "medium", "high"):
        raise bad_request('\'text.verbosity\' must be "low", "medium" or "high".', param="text.verbosity")
    return {"format": fmt, **({"verbosity": verbosity} if verbosity else {})}


def _response_format(text: dict[str, Any]) -> dict[str, Any] | None:
    fmt = text["format"]
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    if fmt["type"] == "json_schema":
        schema = {"name": fmt["name"], "schema": fmt["schema"], "strict": fmt.get("strict")}
        return {"type": "json_schema", "json_schema": schema}
    return None


def _reasoning(value: dict[str, Any] | None) -> dict[str, Any]:
    value = value or {}
    effort, summary = value.get("effort"), value.get("summary")
    if effort is not None and effort != "none" and effort not in EFFORTS:
        raise bad_request(f"'reasoning.effort' must be one of none, {', '.join(EFFORTS)}.", param="reasoning.effort")
    if summary not in (None, "auto", "concise", "detailed"):
        raise bad_request('\'reasoning.summary\' must be "auto", "concise" or "detailed".', param="reasoning.summary")
    return {"effort": effort, "summary": summary}


def _thinking_switches(reasoning: dict[str, Any]) -> dict[str, Any]:
    """``effort: none`` turns thinking off; an effort is passed where the model's template takes one."""
    effort = reasoning["effort"]
    if effort == "none":
        return {"enable_thinking": False}
    return {"reasoning_effort": EFFORTS[effort]} if effort else {}


def _logprobs(f: Fields) -> tuple[bool, int | None]:
    include = f.body.get("include")
    if include is not None and (not isinstance(include, list) or not all(isinstance(i, str) for i in include)):
        raise f.fail("include", "a list of strings")
    top = f.integer("top_logprobs", 0, MAX_TOP_LOGPROBS)
    return LOGPROBS_INCLUDE in (include or []) or top is not None, top


def _metadata(f: Fields) -> dict[str, str]:
    metadata = f.obj("metadata") or {}
    if len(metadata) > 16 or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise f.fail("metadata", "an object of at most 16 string keys with string values")
    return metadata


def _truncation(f: Fields) -> str:
    value = f.text("truncation") or "disabled"
    if value not in ("auto", "disabled"):
        raise f.fail("truncation", '"auto" or "disabled"')
    return value
