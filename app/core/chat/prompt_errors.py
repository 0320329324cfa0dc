"""Messages for requests that do not fit the loaded context."""

# Named in words (the error vocabulary rule); README's API section gives the server's option for it.
CONTEXT_SETTINGS = "the server's context size option, or the model's context size in its settings (Library)"


def prompt_too_long_message(prompt_tokens: int, n_ctx: int) -> str:
    return (
        f"The conversation needs {prompt_tokens:,} tokens but the model is loaded with a context of {n_ctx:,}. "
        "Shorten the message, start a new chat, or load the model with a larger context size."
    )


def beyond_training_message(model: str, tokens: int, trained: int) -> str:
    """The prompt alone is longer than the context the model was trained on (the server grows a context no further)."""
    return (
        f"The request needs {tokens:,} tokens of context for its prompt alone, but '{model}' was trained on a "
        f"context of {trained:,} tokens, the most the server loads it with by itself. Shorten the request, or set a "
        f"larger context yourself if the model can be stretched past its training: {CONTEXT_SETTINGS}."
    )


def beyond_memory_message(model: str, tokens: int, needed: int, fits: int) -> str:
    """No context that holds the prompt fits this machine's memory by the estimate."""
    most = f"at most {fits:,} tokens" if fits else "no context at all"
    return (
        f"The request needs {tokens:,} tokens of context for its prompt ({needed:,} with room for the reply), but "
        f"'{model}' fits this machine's memory with {most}, by the memory estimate. Free memory, use a q8_0 KV cache "
        f"in the model's settings, or shorten the request; the context a model loads with is set by {CONTEXT_SETTINGS}."
    )


def window_model_message(model: str, tokens: int, n_ctx: int, wanted: int) -> str:
    """The model is the window's, the window is waiting to use it, and the prompt does not fit its context."""
    return (
        f"The request needs {tokens:,} tokens of context but '{model}' is loaded in the window with a context of "
        f"{n_ctx:,} and the window is using it. Load it there with a context of at least {wanted:,} tokens, or send "
        "the request again when the window is idle (the server then reloads it with a context that fits)."
    )


def vllm_context_hint(message: str) -> str:
    """vLLM's own refusal of a request longer than its context, with the setting that changes it (its server's)."""
    if "maximum context length" not in message:
        return message
    return (
        f"{message.rstrip()} The context is the vLLM server's own: start it with a larger --max-model-len, or send a "
        "shorter request (or a smaller max_tokens)."
    )
