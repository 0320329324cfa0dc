"""Images as vLLM and Ollama take them, over real HTTP to the fakes: vLLM gets OpenAI content parts with the
image as a data: URI (as its chat API documents), Ollama gets the message's text in ``content`` and the images
as base64 strings in ``images`` (its /api/chat); the app's own file: URLs are made data: URIs first."""

from __future__ import annotations

import asyncio
import base64

import pytest

from app.backends.ollama import OllamaBackend
from app.backends.vllm import VllmBackend
from app.core.chat.conversation import Attachment, Conversation, Message, Role
from app.core.errors import InvalidInputError
from app.core.params import LoadParams, SamplingParams
from app.services.chat.attachments import AttachmentError, AttachmentStore, inline_images
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.projector_factory import data_uri, png_bytes

PNG = png_bytes(12, 9)
PARTS = [
    {"type": "text", "text": "What is in this picture?"},
    {"type": "image_url", "image_url": {"url": data_uri(PNG)}},
]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _drain(stream) -> str:
    return "".join([d.text async for d in stream])


def test_vllm_gets_openai_content_parts_with_data_uris():
    async def scenario(url):
        backend = VllmBackend(url)
        await backend.load("tiny-vl", LoadParams(n_ctx=2048))
        await _drain(backend.stream_chat([{"role": "user", "content": PARTS}], SamplingParams(max_tokens=4)))
        return backend.model

    with FakeOpenAIServer(("tiny-vl",)) as fake:
        model = run(scenario(fake.base_url))
        body = fake.requests_to("/v1/chat/completions")[0].json
    assert body["messages"] == [{"role": "user", "content": PARTS}]
    assert model.vision is None  # vLLM does not say: the server refuses images for a text model itself


@pytest.fixture
def ollama():
    with FakeOllama() as server:
        server.add_model("llava", capabilities=["completion", "vision"])
        server.add_model("llama3.2")
        yield server
    assert not server.handler_errors


def test_ollama_gets_text_content_and_base64_images(ollama):
    async def scenario():
        backend = OllamaBackend(ollama.base_url)
        info = await backend.load("llava", LoadParams(n_ctx=2048))
        history = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": PARTS},
            {"role": "assistant", "content": "A gradient."},
            {"role": "user", "content": [PARTS[1]]},  # an image without text
        ]
        await _drain(backend.stream_chat(history, SamplingParams(max_tokens=4)))
        other = OllamaBackend(ollama.base_url)
        text_only = await other.load("llama3.2", LoadParams(n_ctx=2048))
        await backend.close()
        await other.close()
        return info, text_only

    info, text_only = run(scenario())
    chats = [r.json for r in ollama.requests_to("/api/chat") if r.json.get("messages")]
    b64 = base64.b64encode(PNG).decode()
    assert chats[0]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is in this picture?", "images": [b64]},
        {"role": "assistant", "content": "A gradient."},
        {"role": "user", "content": "", "images": [b64]},
    ]
    assert (info.vision, text_only.vision) == (True, False)  # from /api/show's capabilities


def test_ollama_refuses_an_image_it_would_have_to_fetch(ollama):
    async def scenario():
        backend = OllamaBackend(ollama.base_url)
        await backend.load("llava", LoadParams(n_ctx=2048))
        try:
            part = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
            with pytest.raises(InvalidInputError) as refused:
                await _drain(backend.stream_chat([{"role": "user", "content": [part]}], SamplingParams()))
            return str(refused.value)
        finally:
            await backend.close()

    assert "base64 data: URI" in run(scenario())


def test_a_chats_images_go_as_file_urls_and_reach_remote_engines_inline(tmp_path):
    """The prompt form names the stored image by file: URL (the llama.cpp worker reads it there); for vLLM and
    Ollama the session makes it a data: URI, read off the event loop."""
    store = AttachmentStore(tmp_path / "Pièces jointes")
    image = store.add_bytes(PNG, "photo.png")
    chat = Conversation(messages=[Message(Role.USER, "Look", attachments=[image])])
    chat.attachments_dir = str(store.root)
    [prompt] = chat.prompt_messages()
    url = prompt["content"][1]["image_url"]["url"]
    assert url == store.path_of(image).as_uri() and url.startswith("file:///")
    assert prompt["content"][0] == {"type": "text", "text": "Look"}
    [inline] = run(inline_images([prompt]))
    assert inline["content"] == [{"type": "text", "text": "Look"}, PARTS[1]]
    bare = Conversation(messages=[Message(Role.USER, "Look", attachments=[image])])
    assert bare.prompt_messages() == [{"role": "user", "content": "Look"}]  # no folder given: text only
    store.path_of(image).unlink()
    with pytest.raises(AttachmentError, match="missing from the attachments folder"):
        run(inline_images([prompt]))


def test_attachments_are_content_addressed_with_their_real_type(tmp_path):
    store = AttachmentStore(tmp_path / "att")
    source = tmp_path / "holiday snap.jpeg"  # the name says JPEG; the bytes are a PNG
    source.write_bytes(PNG)
    first = run(store.add_files([source]))[0]
    again = store.add_bytes(PNG, "copy.png")
    assert first.path == again.path and first.path.endswith(".png") and first.mime == "image/png"
    assert (first.width, first.height, first.size, first.name) == (12, 9, len(PNG), "holiday snap.jpeg")
    assert len(list(store.root.rglob("*.png"))) == 1 and store.path_of(first).read_bytes() == PNG
    assert Attachment.from_dict(first.to_dict()) == first
    with pytest.raises(AttachmentError, match="not an image the app can send"):
        store.add_bytes(b"%PDF-1.7 not an image", "report.pdf")
