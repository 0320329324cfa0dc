"""Tiny GGUF model files generated on the fly, so tests can run the real llama.cpp without downloads.

The "model" has random weights (its output is gibberish) but is otherwise complete: llama hyper-parameters,
every tensor llama.cpp's ``llama`` architecture loads, and a real byte-level BPE tokenizer (GPT-2 style, with
merges learned from a small built-in English corpus) plus the ChatML control tokens.

Everything is deterministic: the same arguments always give the same file.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from app.devtools import gguf_shapes as _shapes

__all__ = [
    "CALIBRATION_SHAPES",
    "CHATML_TEMPLATE",
    "SPECIAL_TOKENS",
    "write_not_gguf",
    "write_shaped_gguf",
    "write_tiny_gguf",
    "write_truncated_gguf",
    "write_unknown_architecture_gguf",
]

# A standard ChatML template, as found in many Hugging Face tokenizer configs. (It is deliberately not the
# byte-identical copy of llama-cpp-python's built-in CHATML template, so llama-cpp-python renders it with Jinja
# like any other template stored in a model, instead of switching to its hard-coded "chatml" formatter.)
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

BOS_TOKEN = "<|endoftext|>"
IM_START_TOKEN = "<|im_start|>"
IM_END_TOKEN = "<|im_end|>"
EOS_TOKEN = IM_END_TOKEN
# Control tokens appended after the byte and merge tokens, in this order.
SPECIAL_TOKENS = (BOS_TOKEN, IM_START_TOKEN, IM_END_TOKEN)

N_MERGES = 320

_CORPUS = """\
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
Hello, world! Hello there, how are you today? I am fine, thank you, and how are you?
This is a small test model. It is used by the test suite to check that the application can load a model,
tokenize text, render a chat template and stream a reply. The reply is not meant to make any sense at all,
because the weights of the model are random numbers, but the tokenizer is a real one and it should be able to
split English text into tokens and put the tokens back together into the very same text.
The user asks a question and the assistant gives an answer. The system message tells the assistant what to do.
Please write a short story about a cat and a dog who live in a small house near the river.
Once upon a time there was a little cat. The cat liked to sleep in the sun, and the dog liked to run in the
garden. Every morning they went down to the river together and watched the boats go by.
What is the capital of France? The capital of France is Paris. What is two plus two? Two plus two is four.
Can you help me with my code? Of course I can help you. Please show me the code and the error message.
The function returns a list of numbers: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100, 1000, 2024, 2025 and 2026.
We're testing, they've tested, you'll test, it's tested, I'd say that the tests don't lie.
Models, settings, chats, messages, tokens, templates, prompts, answers, questions and downloads.
The computer is running the program. The program is reading the file. The file is on the disk.
Thank you for your help! You are welcome. Good morning, good evening and good night.
"""

# GPT-2 style pre-tokenization (contractions, words with an optional leading space, numbers, punctuation, spaces).
_PRETOKENIZE = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+")


@functools.cache
def _bpe_vocab() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tokens, merges) of a byte-level BPE trained on the built-in corpus; tokens exclude the special ones."""
    byte_chars = _shapes.bytes_to_unicode()
    word_counts = Counter(_PRETOKENIZE.findall(_CORPUS))
    # Each distinct pre-token as a list of symbols (initially one per byte) with its corpus frequency.
    words = [([byte_chars[b] for b in word.encode("utf-8")], count) for word, count in sorted(word_counts.items())]
    tokens = [byte_chars[b] for b in range(256)]
    known = set(tokens)
    merges: list[str] = []
    while len(merges) < N_MERGES:
        pairs: Counter[tuple[str, str]] = Counter()
        for symbols, count in words:
            for pair in itertools.pairwise(symbols):
                pairs[pair] += count
        if not pairs:
            break
        # Most frequent pair; ties broken by the pair itself, so the result never depends on dict order.
        (left, right), _ = max(pairs.items(), key=lambda item: (item[1], item[0]))
        merged = left + right
        merges.append(f"{left} {right}")
        if merged not in known:
            known.add(merged)
            tokens.append(merged)
        for symbols, _count in words:
            i = 0
            while i < len(symbols) - 1:
                if symbols[i] == left and symbols[i + 1] == right:
                    symbols[i : i + 2] = [merged]
                i += 1
    return tuple(tokens), tuple(merges)


def _add_tokenizer(writer: gguf.GGUFWriter, chat_template: str | None) -> int:
    """Write the tokenizer metadata; returns the vocabulary size."""
    bpe_tokens, merges = _bpe_vocab()
    tokens = [*bpe_tokens, *SPECIAL_TOKENS]
    types = [gguf.TokenType.NORMAL] * len(bpe_tokens) + [gguf.TokenType.CONTROL] * len(SPECIAL_TOKENS)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(list(merges))
    writer.add_bos_token_id(tokens.index(BOS_TOKEN))
    writer.add_eos_token_id(tokens.index(EOS_TOKEN))
    writer.add_pad_token_id(tokens.index(BOS_TOKEN))
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    return len(tokens)


def _output_matrix(weights: np.ndarray, never_eos: bool) -> np.ndarray:
    """Zero the rows of tokens the model should never pick greedily (their logit is then exactly 0)."""
    silenced = [b for b in range(256) if not (0x20 <= b < 0x7F or b == 0x0A)]
    if never_eos:
        silenced += range(len(weights) - len(SPECIAL_TOKENS), len(weights))
    weights[silenced] = 0
    return weights


def write_tiny_gguf(
    path: str | os.PathLike[str],
    *,
    chat_template: str | None = CHATML_TEMPLATE,
    architecture: str = "llama",
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    context_length: int = 2048,
    seed: int = 0,
    name: str = "tiny-test-model",
    never_eos: bool = False,
) -> Path:
    """Write a tiny llama-architecture GGUF with random f16 weights and a real BPE tokenizer to ``path``.

    The output rows of non-printable byte tokens are zero, so the model writes readable UTF-8; with
    ``never_eos`` the special tokens' rows are zero too, so greedy decoding always runs to max_tokens.
    """
    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError("n_embd must be a multiple of n_head, and n_head a multiple of n_head_kv")
    return _shapes.write_shaped_gguf(
        path,
        architecture=architecture,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        context_length=context_length,
        seed=seed,
        name=name,
        add_tokenizer=lambda writer: _add_tokenizer(writer, chat_template),
        rms_eps=1e-5,
        adjust_output=lambda weights: _output_matrix(weights, never_eos),
    )


def write_unknown_architecture_gguf(path: str | os.PathLike[str]) -> Path:
    """A well-formed GGUF whose ``general.architecture`` llama.cpp does not know, so loading it fails."""
    return write_tiny_gguf(path, architecture="nosucharch", name="unknown-architecture")


def write_truncated_gguf(path: str | os.PathLike[str]) -> Path:
    """A tiny GGUF cut in half: the header and metadata are intact, the tensor data is not."""
    path = Path(path)
    write_tiny_gguf(path, name="truncated")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def write_not_gguf(path: str | os.PathLike[str]) -> Path:
    """A plain text file (use a ``.gguf`` name to make it look like a model)."""
    path = Path(path)
    path.write_text("This is not a GGUF model file, just some text with a .gguf name.\n", encoding="utf-8")
    return path


# --- Model shapes for the memory-estimate calibration (the writer lives in the app: ``bench estimate`` uses it) ---

CALIBRATION_SHAPES = _shapes.CALIBRATION_SHAPES


def write_shaped_gguf(path: str | os.PathLike[str], **shape: Any) -> Path:
    """A random-weight f16 model of a chosen shape (see ``app.devtools.gguf_shapes.write_shaped_gguf``) with this
    module's real BPE tokenizer and the ChatML template."""
    return _shapes.write_shaped_gguf(
        path, add_tokenizer=lambda writer: _add_tokenizer(writer, CHATML_TEMPLATE), **shape
    )
