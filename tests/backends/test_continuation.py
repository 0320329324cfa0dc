"""The text-continuation chat format and continuing a reply, in the real worker."""

from __future__ import annotations

import asyncio

from app.backends.llamacpp.backend import LlamaCppBackend
from app.backends.llamacpp.continuation import continuation_text
from app.core.chat.formats import TEXT_CONTINUATION_FORMAT
from app.core.params import LoadParams, SamplingParams


def test_the_conversation_reads_as_one_text():
    messages = [
        {"role": "system", "content": "A story."},
        {"role": "user", "content": "The keeper climbed"},
        {"role": "assistant", "content": " the stairs."},
        {"role": "user", "content": "Then"},
    ]
    assert continuation_text(messages) == "A story.\n\nThe keeper climbed the stairs.\n\nThen"
    assert continuation_text([{"role": "system", "content": " "}, {"role": "user", "content": "x"}]) == "x"


def test_text_continuation_loads_and_prompts_with_the_text_alone(tiny_gguf):
    async def scenario():
        backend = LlamaCppBackend()
        try:
            info = await backend.load(str(tiny_gguf), LoadParams(n_ctx=256, chat_format=TEXT_CONTINUATION_FORMAT))
            sampling = SamplingParams(max_tokens=2, temperature=0.0)
            async for _ in backend.stream_chat([{"role": "user", "content": "hello world"}], sampling):
                pass
            plain = backend.stats()
            await backend.load(str(tiny_gguf), LoadParams(n_ctx=256))  # its ChatML template
            async for _ in backend.stream_chat([{"role": "user", "content": "hello world"}], sampling):
                pass
            return info, plain, backend.stats()
        finally:
            await backend.close()

    info, plain, chatml = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert info.chat_format == TEXT_CONTINUATION_FORMAT and "continues" in info.chat_format_reason
    assert plain.prompt_tokens < chatml.prompt_tokens - 4  # no turn markers around the text
