"""Messages for requests that do not fit the loaded context."""


def prompt_too_long_message(prompt_tokens: int, n_ctx: int) -> str:
    return (
        f"The conversation needs {prompt_tokens:,} tokens but the model is loaded with a context of {n_ctx:,}. "
        "Shorten the message, start a new chat, or load the model with a larger context size."
    )
