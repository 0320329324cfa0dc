"""OpenAI request bodies (``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``) read into what the
engines take. Text models only: image, audio and file parts are refused with the reason."""

from __future__ import annotations

from typing import Any

from app.core.params import MAX_TOP_LOGPROBS, GenerationOptions
from app.services.api.errors import bad_request
from app.services.api.fields import Fields, GenerationCall, sampling_fields

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
MAX_EMBED_INPUTS = 2048
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
MAX_CHOICES = 8  # 'n': choices per request (llama.cpp writes them one after another)
TEXT_ONLY = "this server runs text models; send text parts only."


def chat_call(body: dict[str, Any], max_tokens_limit: int) -> GenerationCall:
    f = Fields(body)
    call = _common(f, max_tokens_limit, ("max_completion_tokens", "max_tokens"))
    call.messages = chat_messages(body.get("messages"))
    f.refuse("functions", "send them as 'tools' instead.")
    f.refuse("function_call", "use 'tool_choice' with 'tools' instead.")
    f.refuse("audio", TEXT_ONLY)
    f.refuse("prediction", "predicted outputs are not supported.")
    if (modalities := body.get("modalities")) is not None and modalities != ["text"]:
        raise bad_request("'modalities' must be [\"text\"]: " + TEXT_ONLY, param="modalities")
    logprobs = bool(f.boolean("logprobs"))
    top = f.integer("top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top is not None and not logprobs:
        raise bad_request("'top_logprobs' needs 'logprobs': true.", param="top_logprobs")
    call.options = _options(
        f,
        response_format=f.obj("response_format"),
        tools=body.get("tools"),
        tool_choice=body.get("tool_choice"),
        parallel_tool_calls=f.boolean("parallel_tool_calls"),  # unset: one call when a call is forced
        logprobs=logprobs,
        top_logprobs=top,
        grammar=f.text("grammar"),  # llama-server's extension: a raw GBNF grammar (llama.cpp only)
        **thinking_switches(f),
    )
    return call


def thinking_switches(f: Fields) -> dict[str, Any]:
    """``reasoning_effort`` (OpenAI's; "none" turns thinking off, "minimal" is "low") and vLLM's
    ``chat_template_kwargs: {"enable_thinking"|"thinking": bool}``, as the options the engines take."""
    switches: dict[str, Any] = {}
    effort = f.text("reasoning_effort")
    if effort == "none":
        switches["enable_thinking"] = False
    elif effort is not None:
        switches["reasoning_effort"] = "low" if effort == "minimal" else effort
    kwargs = f.obj("chat_template_kwargs") or {}
    for key in ("enable_thinking", "thinking"):
        if key in kwargs:
            if not isinstance(kwargs[key], bool):
                raise bad_request(f"'chat_template_kwargs.{key}' must be true or false.", param="chat_template_kwargs")
            switches["enable_thinking"] = kwargs[key]
    return switches


def completion_call(body: dict[str, Any], max_tokens_limit: int) -> GenerationCall:
    f = Fields(body)
    echo = bool(f.boolean("echo"))
    scoring = _asks_no_tokens(body)  # echo with max_tokens 0: the prompt (and its logprobs) only, as evals ask
    if scoring and not echo:
        raise bad_request("'max_tokens' 0 asks for no completion: send 'echo': true with it to get the prompt back "
                          "(with 'logprobs', its tokens' log-probabilities), or ask for at least 1 token.",
                          param="max_tokens")  # fmt: skip
    call = _common(Fields({**body, "max_tokens": None}) if scoring else f, max_tokens_limit, ("max_tokens",))
    call.sampling.setdefault("max_tokens", 0 if scoring else COMPLETION_DEFAULT_MAX_TOKENS)
    call.prompt = _prompt(body.get("prompt"))
    call.echo = echo
    f.refuse("suffix", "fill-in-the-middle is not supported.")
    if (best_of := f.integer("best_of", 1)) is not None and best_of != 1:
        raise bad_request("'best_of' must be 1 here: one completion per request.", param="best_of")
    top = f.integer("logprobs", 0, MAX_TOP_LOGPROBS)
    call.options = _options(f, logprobs=top is not None, top_logprobs=top, grammar=f.text("grammar"), echo=echo)
    return call


def _choices(f: Fields) -> int:
    n = f.integer("n", 1) or 1
    if n > MAX_CHOICES:
        raise bad_request(f"'n' is {n}: this server makes at most {MAX_CHOICES} choices per request. Ask for fewer, "
                          "or send several requests.", param="n", code="too_many_choices")  # fmt: skip
    return n


def _asks_no_tokens(body: dict[str, Any]) -> bool:
    value = body.get("max_tokens")
    return type(value) is int and value == 0


def embedding_inputs(body: dict[str, Any]) -> list[str]:
    f = Fields(body)
    f.refuse("dimensions", "the model's vectors have the size it was trained with.")
    fmt = f.text("encoding_format")
    if fmt not in (None, "float", "base64"):
        raise f.fail("encoding_format", '"float" or "base64"')
    value = body.get("input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise bad_request("'input' must be a string or a non-empty list of strings (token arrays are not "
                          "accepted here).", param="input")  # fmt: skip
    if len(texts) > MAX_EMBED_INPUTS:
        raise bad_request(f"'input' may hold at most {MAX_EMBED_INPUTS} texts per request.", param="input")
    if any(not t for t in texts):
        raise bad_request("'input' must not contain empty strings.", param="input")
    return texts


def _common(f: Fields, max_tokens_limit: int, max_keys: tuple[str, ...]) -> GenerationCall:
    model = f.text("model", required=True) or ""
    f.refuse("logit_bias", "token biases are not supported.")
    sampling = sampling_fields(f)
    if (stop := f.stops("stop")) is not None:
        sampling["stop"] = stop
    if (max_tokens := f.max_tokens(max_keys, max_tokens_limit)) is not None:
        sampling["max_tokens"] = max_tokens
    stream = bool(f.boolean("stream"))
    options = f.obj("stream_options") or {}
    include_usage = options.get("include_usage")
    if include_usage is not None and not isinstance(include_usage, bool):
        raise bad_request("'stream_options.include_usage' must be true or false.", param="stream_options")
    return GenerationCall(model, sampling=sampling, stream=stream, include_usage=bool(include_usage),
                          keep_alive=f.keep_alive(), n=_choices(f))  # fmt: skip


def _options(f: Fields, **fields: Any) -> GenerationOptions:
    options = GenerationOptions(**fields, exact_stops=f.has("stop"))  # a client's stops are obeyed exactly
    if found := options.problems():
        text = " ".join(found)
        param = next((name for word, name in (("grammar", "grammar"), ("logprobs", "top_logprobs"), ("tool", "tools"),
                                              ("reasoning_effort", "reasoning_effort"))
                      if word in text), "response_format")  # fmt: skip
        raise bad_request(" ".join(found), param=param)
    return options


def _prompt(value: Any) -> str:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        raise bad_request("'prompt' must be one string here: send one prompt per request.", param="prompt")
    if not isinstance(value, str):
        raise bad_request("'prompt' must be a string (token arrays are not accepted here).", param="prompt")
    return value


def chat_messages(value: Any) -> list[dict[str, Any]]:
    """OpenAI messages as the engines take them: text content, tool calls with JSON-text arguments, tool results
    with their call's id. ``developer`` is a system message."""
    if not isinstance(value, list) or not value:
        raise bad_request("'messages' must be a non-empty list of messages.", param="messages")
    return [_message(m, i) for i, m in enumerate(value)]


def _message(message: Any, index: int) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        raise bad_request(f"'{where}' must be an object whose role is one of {', '.join(ROLES)}.", param=where)
    role = ROLES[message["role"]]
    out: dict[str, Any] = {"role": role, "content": _content(message.get("content"), f"{where}.content")}
    calls = message.get("tool_calls")
    if role == "assistant" and calls:
        out["tool_calls"] = [_tool_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(_list(calls, where))]
    elif out["content"] is None:
        raise bad_request(f"'{where}.content' is required.", param=f"{where}.content")
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise bad_request(f"'{where}.tool_call_id' is required for a tool message.", param=f"{where}.tool_call_id")
        out["tool_call_id"] = call_id
    if isinstance(message.get("name"), str) and message["name"]:
        out["name"] = message["name"]
    reasoning = message.get("reasoning_content")
    if role == "assistant" and isinstance(reasoning, str) and reasoning:  # for a template that shows it again
        out["reasoning_content"] = reasoning
    return out


def _content(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise bad_request(f"'{where}' must be a string or a list of text parts.", param=where)
    texts = []
    for i, part in enumerate(value):
        if not isinstance(part, dict) or part.get("type") not in ("text", "input_text"):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise bad_request(f"'{where}[{i}]' is a {kind} part: {TEXT_ONLY}", param=where)
        if not isinstance(part.get("text"), str):
            raise bad_request(f"'{where}[{i}].text' must be a string.", param=where)
        texts.append(part["text"])
    return "".join(texts)


def _tool_call(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise bad_request(f"'{where}' must be {{\"id\", \"type\": \"function\", \"function\": {{\"name\", "
                          f"\"arguments\"}}}}.", param=where)  # fmt: skip
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        raise bad_request(f"'{where}.function.arguments' must be a JSON string.", param=where)
    call_id = call.get("id") if isinstance(call.get("id"), str) else f"call_{abs(hash(where)) % 10**8}"
    return {"id": call_id, "type": "function", "function": {"name": function["name"], "arguments": arguments}}


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise bad_request(f"'{where}.tool_calls' must be a list.", param=where)
    return value
