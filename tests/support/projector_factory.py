"""Tiny vision projectors (``mmproj`` GGUFs) that llama.cpp's mtmd really loads, and small images to send them.

The projector is a LLaVA-style "mlp" one: a one-block ViT (32x32 images in 8x8 patches: 16 image tokens) and a
two-layer MLP projection whose output size is chosen (the language model's embedding_length when it belongs to
it). Weights are random, so what the model says about an image means nothing; the path through mtmd is real.
"""

from __future__ import annotations

import base64
import os
import struct
import zlib
from pathlib import Path

import gguf
import numpy as np

from tests.support.gguf_factory import write_tiny_gguf

# A ChatML template that also takes OpenAI content parts (text parts shown, images as mtmd's marker text).
VISION_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}"
    "{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
IMAGE_TOKENS = 16  # (32 / 8) ** 2 patches, one embedding each


def write_tiny_vision_model(path: str | os.PathLike[str], name: str = "tiny-vision") -> Path:
    """The tiny llama model (embedding_length 64) with a template that accepts image parts."""
    return write_tiny_gguf(path, chat_template=VISION_TEMPLATE, name=name)


def write_tiny_projector(
    path: str | os.PathLike[str],
    *,
    output_size: int = 64,
    projector_type: str = "mlp",
    vision: bool = True,
    n_embd: int = 32,
    n_ff: int = 64,
    image_size: int = 32,
    patch_size: int = 8,
) -> Path:
    """A random-weight mmproj GGUF (``general.architecture`` "clip") producing ``output_size``-wide embeddings."""
    path = Path(path)
    rng = np.random.default_rng(1)
    writer = gguf.GGUFWriter(path, "clip")
    writer.add_name("tiny-projector")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_bool(gguf.Keys.Clip.HAS_VISION_ENCODER, vision)
    writer.add_bool(gguf.Keys.Clip.HAS_AUDIO_ENCODER, not vision)
    writer.add_bool(gguf.Keys.Clip.HAS_LLAVA_PROJECTOR, True)
    writer.add_string(gguf.Keys.Clip.PROJECTOR_TYPE, projector_type)
    writer.add_bool(gguf.Keys.ClipVision.USE_GELU, True)
    writer.add_uint32(gguf.Keys.ClipVision.IMAGE_SIZE, image_size)
    writer.add_uint32(gguf.Keys.ClipVision.PATCH_SIZE, patch_size)
    writer.add_uint32(gguf.Keys.ClipVision.EMBEDDING_LENGTH, n_embd)
    writer.add_uint32(gguf.Keys.ClipVision.FEED_FORWARD_LENGTH, n_ff)
    writer.add_uint32(gguf.Keys.ClipVision.PROJECTION_DIM, output_size)
    writer.add_uint32(gguf.Keys.ClipVision.BLOCK_COUNT, 1)
    writer.add_uint32(gguf.Keys.ClipVision.Attention.HEAD_COUNT, 2)
    writer.add_float32(gguf.Keys.ClipVision.Attention.LAYERNORM_EPS, 1e-6)
    writer.add_array(gguf.Keys.ClipVision.IMAGE_MEAN, [0.5, 0.5, 0.5])
    writer.add_array(gguf.Keys.ClipVision.IMAGE_STD, [0.5, 0.5, 0.5])

    def tensor(name: str, *shape: int, half: bool = True) -> None:
        values = rng.standard_normal(shape) * 0.02
        writer.add_tensor(name, values.astype(np.float16 if half else np.float32))

    tensor("v.patch_embd.weight", n_embd, 3, patch_size, patch_size)
    tensor("v.position_embd.weight", (image_size // patch_size) ** 2, n_embd)
    for norm in ("v.pre_ln", "v.blk.0.ln1", "v.blk.0.ln2"):
        tensor(f"{norm}.weight", n_embd, half=False)
        tensor(f"{norm}.bias", n_embd, half=False)
    for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
        tensor(f"v.blk.0.{proj}.weight", n_embd, n_embd)
        tensor(f"v.blk.0.{proj}.bias", n_embd, half=False)
    tensor("v.blk.0.ffn_up.weight", n_ff, n_embd)
    tensor("v.blk.0.ffn_up.bias", n_ff, half=False)
    tensor("v.blk.0.ffn_down.weight", n_embd, n_ff)
    tensor("v.blk.0.ffn_down.bias", n_embd, half=False)
    tensor("mm.0.weight", output_size, n_embd)
    tensor("mm.0.bias", output_size, half=False)
    tensor("mm.2.weight", output_size, output_size)
    tensor("mm.2.bias", output_size, half=False)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def png_bytes(width: int = 40, height: int = 30) -> bytes:
    """A small RGB PNG (a colour gradient)."""
    rows = b"".join(
        b"\x00" + bytes(v for x in range(width) for v in ((x * 7) % 256, (y * 9) % 256, 128)) for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
