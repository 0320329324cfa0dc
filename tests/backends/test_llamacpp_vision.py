"""Images through the real llama.cpp worker: a tiny model paired with a generated projector that llama.cpp's mtmd
really loads (tests/support/projector_factory.py), the image really encoded into the prompt."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.backends.protocol import GenerationError, ModelLoadError, RequestRefusedError
from app.core.params import LoadParams, SamplingParams
from tests.support.projector_factory import (
    IMAGE_TOKENS,
    data_uri,
    png_bytes,
    write_tiny_projector,
    write_tiny_vision_model,
)

GREEDY = SamplingParams(max_tokens=8, seed=1, temperature=0.0)
TEXT_ONLY = [{"role": "user", "content": "What is this?"}]


def with_image(url: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image_part(url)]}]


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


@pytest.fixture(scope="module")
def vision_dir(tmp_path_factory):
    """A model folder with a non-ASCII name: the model and its projector side by side."""
    folder = tmp_path_factory.mktemp("vision") / "Modèles · 視覚"
    folder.mkdir()
    write_tiny_vision_model(folder / "tiny-vl-Q8_0.gguf")
    write_tiny_projector(folder / "mmproj-tiny-vl-F16.gguf")
    return folder


async def _reply(backend, messages):
    text = "".join([d.text async for d in backend.stream_chat(messages, GREEDY)])
    return text, backend.stats()


def test_a_paired_model_reads_an_image_through_mtmd(vision_dir, tmp_path):
    image_file = tmp_path / "photo é.png"
    image_file.write_bytes(png_bytes())

    async def scenario():
        backend = LlamaCppBackend()
        try:
            info = await backend.load(str(vision_dir / "tiny-vl-Q8_0.gguf"), LoadParams(n_ctx=512))
            text_only = await _reply(backend, TEXT_ONLY)
            inline = await _reply(backend, with_image(data_uri(png_bytes())))
            from_file = await _reply(backend, with_image(image_file.as_uri()))
            counted = await backend.count_tokens(with_image(data_uri(png_bytes())), None)
            return info, text_only, inline, from_file, counted
        finally:
            await backend.close()

    info, (_, plain), (inline_text, inline), (file_text, from_file), counted = run(scenario())
    assert info.vision is True and info.projector == str(vision_dir / "mmproj-tiny-vl-F16.gguf")
    assert info.projector_problem is None
    # the image became IMAGE_TOKENS embeddings in the prompt: the same text with an image is that much longer
    assert inline.prompt_tokens - plain.prompt_tokens == IMAGE_TOKENS
    assert from_file.prompt_tokens == inline.prompt_tokens and file_text == inline_text  # same image, same reply
    assert inline.completion_tokens > 0 and inline_text
    assert counted == inline.prompt_tokens


def test_text_chats_on_a_vision_model_keep_the_prefix_cache(vision_dir):
    """Chats without images stay on the model's usual handler, so a follow-up reuses the cached prompt."""

    async def scenario():
        backend = LlamaCppBackend()
        try:
            await backend.load(str(vision_dir / "tiny-vl-Q8_0.gguf"), LoadParams(n_ctx=512))
            first_text, first = await _reply(backend, TEXT_ONLY)
            follow_up = [*TEXT_ONLY, {"role": "assistant", "content": first_text}, {"role": "user", "content": "ok"}]
            _, second = await _reply(backend, follow_up)
            return first, second
        finally:
            await backend.close()

    first, second = run(scenario())
    assert second.prompt_tokens > first.prompt_tokens > 0


def test_images_to_a_model_without_a_projector_are_refused_in_words(tiny_gguf):
    async def scenario():
        backend = LlamaCppBackend()
        try:
            info = await backend.load(str(tiny_gguf), LoadParams(n_ctx=256))
            with pytest.raises(RequestRefusedError) as refused:
                await _reply(backend, with_image(data_uri(png_bytes())))
            text, _ = await _reply(backend, TEXT_ONLY)  # the worker is fine afterwards
            return info, str(refused.value), text
        finally:
            await backend.close()

    info, message, text = run(scenario())
    assert info.vision is False and info.projector is None
    assert "cannot read images" in message and "mmproj" in message
    assert isinstance(text, str)


def test_bad_images_and_remote_urls_are_refused_in_words(vision_dir):
    async def scenario():
        backend = LlamaCppBackend()
        try:
            await backend.load(str(vision_dir / "tiny-vl-Q8_0.gguf"), LoadParams(n_ctx=512))
            errors = []
            for url in ("data:image/png;base64," + "QUJD", "https://example.com/cat.png", "file:///no/such/image.png"):
                with pytest.raises(GenerationError) as failed:
                    await _reply(backend, with_image(url))
                errors.append(str(failed.value))
            _text, stats = await _reply(backend, with_image(data_uri(png_bytes())))  # still reads a good one
            return errors, stats
        finally:
            await backend.close()

    (undecodable, remote, missing), stats = run(scenario())
    assert "could not be decoded" in undecodable and "PNG, JPEG" in undecodable
    assert "data: URIs" in remote
    assert "cannot be read" in missing and "image.png" in missing
    assert stats.prompt_tokens > IMAGE_TOKENS


def test_a_projector_mtmd_cannot_load_is_a_load_error_not_a_crash(tmp_path):
    """A projector that passes the header checks but that mtmd refuses (here: it says "gemma3" but holds an MLP
    projector's tensors) fails the load with words; the worker stays up for the next load."""
    folder = tmp_path / "broken"
    folder.mkdir()
    model = write_tiny_vision_model(folder / "tiny-vl.gguf")
    write_tiny_projector(folder / "mmproj-tiny-vl-f16.gguf", projector_type="gemma3")
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(model, plain / "tiny-vl.gguf")

    async def scenario():
        backend = LlamaCppBackend()
        try:
            with pytest.raises(ModelLoadError) as failed:
                await backend.load(str(model), LoadParams(n_ctx=256))
            pid = backend.worker_pid
            info = await backend.load(str(plain / "tiny-vl.gguf"), LoadParams(n_ctx=256))
            return str(failed.value), pid, backend.worker_pid, info
        finally:
            await backend.close()

    message, pid_before, pid_after, info = run(scenario())
    assert "mmproj-tiny-vl-f16.gguf could not be loaded" in message and "text only" in message
    assert pid_before == pid_after  # not a crash: the same worker loads the next model
    assert info.vision is False


def test_an_image_that_overflows_the_context_says_so_like_any_long_prompt(vision_dir):
    """A prompt whose text fits the context but not with the image's tokens: the usual too-long message."""

    def asking(words: int, image: bool) -> list[dict]:
        text = "hello " * words
        content = [{"type": "text", "text": text}, image_part(data_uri(png_bytes()))] if image else text
        return [{"role": "user", "content": content}]

    async def scenario():
        backend = LlamaCppBackend()
        try:
            info = await backend.load(str(vision_dir / "tiny-vl-Q8_0.gguf"), LoadParams(n_ctx=256))
            base = await backend.count_tokens(asking(0, False), None)
            per_word = (await backend.count_tokens(asking(40, False), None) - base) / 40
            words = int((info.n_ctx - base - IMAGE_TOKENS // 2) / per_word)  # the image's tokens tip it over
            text_only = await backend.count_tokens(asking(words, False), None)
            with pytest.raises(RequestRefusedError) as refused:
                await _reply(backend, asking(words, True))
            return info.n_ctx, text_only, str(refused.value)
        finally:
            await backend.close()

    n_ctx, text_only, message = run(scenario())
    assert text_only <= n_ctx < text_only + IMAGE_TOKENS
    assert f"but the model is loaded with a context of {n_ctx}" in message and "larger context" in message


def test_a_projector_named_in_the_load_settings_is_checked_and_used(vision_dir, tmp_path):
    elsewhere = write_tiny_projector(tmp_path / "any name.gguf")
    wrong = write_tiny_projector(tmp_path / "other-model-mmproj.gguf", output_size=32)
    plain = tmp_path / "plain"
    plain.mkdir()
    model = shutil.copy(vision_dir / "tiny-vl-Q8_0.gguf", plain / "model.gguf")

    async def scenario():
        backend = LlamaCppBackend()
        try:
            info = await backend.load(str(model), LoadParams(n_ctx=256, mmproj_path=str(elsewhere)))
            with pytest.raises(ModelLoadError) as refused:
                await backend.load(str(model), LoadParams(n_ctx=256, mmproj_path=str(wrong)))
            return info, str(refused.value)
        finally:
            await backend.close()

    info, message = run(scenario())
    assert info.vision and info.projector == str(elsewhere)
    assert "other-model-mmproj.gguf belongs to another model" in message
