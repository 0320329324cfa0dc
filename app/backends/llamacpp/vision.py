"""Images in llama.cpp chats, inside the worker: the model's projector loaded through llama-cpp-python's
multimodal support (``MTMDChatHandler``), used only for chats that hold images.

Images arrive as OpenAI content parts (``{"type": "image_url", "image_url": {"url": …}}``) with a ``data:`` URI
or a ``file:`` URL (the app's own attachments); other URLs are refused (the worker never fetches from the
network). A chat without images keeps the model's usual chat handler, and with it the prefix cache.

Only the worker imports this module; ``llama_cpp`` is imported on first use.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
import re
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from app.core.errors import AppError, InvalidInputError
from app.core.gguf.header import GgufFileError, GgufHeader, read_gguf_header
from app.core.gguf.projector import Pairing, pair_projector, projector_facts, projector_problem

_MTMD_TOO_LONG = re.compile(r"Prompt exceeds n_ctx: (\d+) > (\d+)")
NO_VISION = (
    "This model cannot read images: it has no vision projector (mmproj file) next to it. Remove the images, or "
    "load a vision model with its mmproj file in the same folder."
)


class ImageInputError(InvalidInputError):
    """An image in the request cannot be used (not inline, unreadable, not an image llama.cpp decodes)."""


class ProjectorLoadError(AppError):
    """The projector did not load (the message says which file and what to do); the load fails with it."""


def has_images(messages: list[dict[str, Any]]) -> bool:
    return any(_is_image_part(part) for m in messages if isinstance(m.get("content"), list) for part in m["content"])


def _is_image_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "image_url"


def choose_projector(path: str, header: GgufHeader, requested: str | None) -> Pairing:
    """The projector to load: ``requested`` (checked against the model), else the one found next to the model."""
    if not requested:
        return pair_projector(path, header)
    try:
        facts = projector_facts(read_gguf_header(requested))
    except GgufFileError as exc:
        raise ProjectorLoadError(f"The projector cannot be used: {exc}") from exc
    if (problem := projector_problem(header, facts)) is not None:
        raise ProjectorLoadError(problem)
    return Pairing(requested, None, facts.size_bytes)


def install(llm: Any, projector: str, use_gpu: bool) -> Any:
    """Give ``llm`` a chat handler that reads images with ``projector``; loads the projector now, so a failure is
    a load error (``ProjectorLoadError``), not a surprise at the first image."""
    handler = _handler_type()(llm, projector, use_gpu)
    try:
        handler._init_mtmd_context(llm)
    except Exception as exc:
        raise ProjectorLoadError(
            f"The vision projector {os.path.basename(projector)} could not be loaded with this model ({exc}). "
            "It may be damaged, belong to another model or need a newer llama-cpp-python. Move it out of the "
            "model's folder to use the model for text only."
        ) from exc
    llm.chat_handler = handler
    return handler


@functools.cache
def _handler_type() -> type:
    """``MTMDChatHandler`` made to keep text-only chats on the model's usual handler (defined on first use)."""
    from llama_cpp import llama_chat_format

    class VisionChatHandler(llama_chat_format.MTMDChatHandler):
        def __init__(self, llm: Any, projector: str, use_gpu: bool) -> None:
            super().__init__(clip_model_path=projector, verbose=False, use_gpu=use_gpu)
            self._llm = llm
            self._text_handler = llm._chat_handlers.get(llm.chat_format) or (
                llama_chat_format.get_chat_completion_handler(llm.chat_format)
            )

        def __call__(self, *, llama: Any, messages: Any, **kwargs: Any) -> Any:
            if not has_images(messages):
                return self._text_handler(llama=llama, messages=messages, **kwargs)
            # mtmd sets ``n_tokens`` on the model it is given: a stand-in (the app's grammar, a token count)
            # must pass that on to the real model, which evaluates the prompt.
            writable: Any = _Writable(llama, self._llm)
            try:
                return super().__call__(llama=writable, messages=messages, **kwargs)
            except ValueError as exc:  # in the words llama.cpp's own prompt check uses, so it reads the same
                if match := _MTMD_TOO_LONG.search(str(exc)):
                    raise ValueError(f"Requested tokens ({match[1]}) exceed context window of {match[2]}") from exc
                raise

        def load_image(self, image_url: str) -> bytes:
            return read_image(image_url)

        def _create_bitmap_from_bytes(self, image_bytes: bytes) -> Any:
            try:
                return super()._create_bitmap_from_bytes(image_bytes)
            except ValueError as exc:
                raise ImageInputError(
                    "An image could not be decoded: send a PNG, JPEG, GIF, BMP or WebP image."
                ) from exc

    return VisionChatHandler


class _Writable:
    """Reads from ``view`` (the model, or a stand-in for it); attributes set go to the real model."""

    def __init__(self, view: Any, real: Any) -> None:
        object.__setattr__(self, "_view", view)
        object.__setattr__(self, "_real", real)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._real, name, value)


def read_image(url: str) -> bytes:
    """The bytes of an image sent as a ``data:`` URI or a ``file:`` URL."""
    if url.startswith("data:"):
        head, _, payload = url.partition(",")
        if not head.endswith(";base64"):
            raise ImageInputError("An image data: URI must be base64-encoded (data:image/png;base64,…).")
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ImageInputError("An image data: URI holds damaged base64 data.") from exc
    parsed = urlparse(url)
    if parsed.scheme == "file":
        path = url2pathname(parsed.path)
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise ImageInputError(f"The image {os.path.basename(path)} cannot be read: {exc.strerror or exc}.") from exc
    raise ImageInputError(
        "Images must be sent inline, as data: URIs (data:image/png;base64,…); the llama.cpp engine does not fetch URLs."
    )


def attach(llm: Any, path: str, header: GgufHeader, requested: str | None, use_gpu: bool) -> dict[str, Any]:
    """Pair the model with its projector and load it; the ``info`` fields that say so (``vision``, ``projector``,
    ``projector_problem``: what is missing or wrong, in words). Raises ``ProjectorLoadError``."""
    pairing = choose_projector(path, header, requested)
    if pairing.projector is not None:
        install(llm, pairing.projector, use_gpu)
    return {"vision": pairing.vision, "projector": pairing.projector, "projector_problem": pairing.problem}
