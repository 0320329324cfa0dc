"""A raw completion's prompt sent back first (OpenAI's ``echo``), with its tokens' log-probabilities when asked:
what lm-evaluation-harness's loglikelihood tasks read (``echo`` + ``logprobs`` + ``max_tokens`` 0 or 1).

llama.cpp keeps only the last position's logits here (no ``logits_all``; see ``logprobs``), so the prompt is
evaluated again with every position's logits asked for, a few positions per batch (one position's logits are
n_vocab floats: a megabyte for a 262k vocabulary). Token i's logprob is the log-softmax of position i-1's logits at
token i — the model's own distribution; the first token has none (null), as in OpenAI's API. A leading BOS token
(and an EOS the tokenizer appends) is no part of the text and is left out, as llama-cpp-python's server does, so
the tokens' texts concatenate to the prompt. The context is left holding the prompt: the completion that follows
reuses it, and ``max_tokens`` 0 generates nothing.

Only the worker imports this module; its one hook is ``Worker._generate`` calling ``echo_completion``.
"""

from __future__ import annotations

import codecs
import ctypes
from typing import TYPE_CHECKING, Any

from app.core.params import GenerationOptions, SamplingParams

if TYPE_CHECKING:
    from app.backends.llamacpp.engine import Emit, LlamaEngine

LOGIT_ROWS = 32  # positions decoded (and their logits read) per batch


def echo_completion(
    engine: LlamaEngine, prompt: str, sampling: SamplingParams, options: GenerationOptions, emit: Emit
) -> dict[str, Any]:
    """Emit ``prompt`` (with its tokens' logprobs when ``options.logprobs``), then continue it as
    ``engine.stream_completion`` does, unless ``max_tokens`` is 0; returns the reply's counts."""
    from app.backends.llamacpp.engine import TokenCounter

    llm = engine._generating_model()
    engine._abort.clear()  # a Stop meant for an earlier reply must not end this one
    tokens, text = prompt_tokens(llm, prompt)
    if len(tokens) > llm.n_ctx():
        raise engine._translate(ValueError(f"Requested tokens ({len(tokens)}) exceed context window of {llm.n_ctx()}"))
    entries = None
    if options.logprobs:
        try:
            entries = scored(llm, prompt, tokens, text, options.top_logprobs or 0)
        except RuntimeError as exc:  # llama_decode failed, or Stop aborted it
            if not engine._abort.is_set():
                raise engine._translate(exc) from exc
            return _counts(engine, len(tokens), "stopped")
    emit(prompt, entries)
    if sampling.max_tokens == 0:
        engine.counter = TokenCounter(prompt_tokens=len(tokens))
        return _counts(engine, len(tokens), "length")
    return engine.stream_completion(prompt, sampling, options, emit)


def prompt_tokens(llm: Any, prompt: str) -> tuple[list[int], slice]:
    """The tokens ``Llama.create_completion`` makes of ``prompt`` (a BOS or CLS first and an EOS or SEP last where
    the model adds them), and where the text's own tokens lie among them."""
    model = llm._model
    bos = model.token_cls() if model.token_cls() != -1 else llm.token_bos()
    sep = model.token_sep()
    head = [bos] if model.add_bos_token() and bos != -1 else []
    tail = [sep if sep != -1 else llm.token_eos()] if model.add_eos_token() or sep != -1 else []
    body = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True) if prompt else []
    tokens = head + body + tail
    if not tokens:
        tokens = [llm.token_bos()]
        return tokens, slice(1, 1)
    return tokens, slice(len(head), len(head) + len(body))


def scored(llm: Any, prompt: str, tokens: list[int], text: slice, top: int) -> list[dict[str, Any]]:
    """Evaluate ``tokens`` (``prompt``'s) from an empty context; the text tokens' entries in OpenAI's chat shape
    (``{"token", "logprob", "bytes", "top_logprobs"}``), the first with ``logprob`` and ``top_logprobs`` None."""
    import llama_cpp
    import numpy as np

    ctx, vocab, n_vocab = llm._ctx.ctx, llm._model.vocab, llm.n_vocab()
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    llm.n_tokens = 0
    rows = max(1, min(LOGIT_ROWS, llm.n_batch))
    logprobs: dict[int, tuple[float, list[tuple[int, float]]]] = {}  # token index → its logprob, top alternatives
    for start in range(0, len(tokens), rows):
        batch = tokens[start : start + rows]
        llm._batch.set_batch(batch=batch, n_past=start, logits_all=True)
        llm._ctx.decode(llm._batch)
        llm.input_ids[start : start + len(batch)] = batch
        llm.n_tokens = start + len(batch)
        for row in range(len(batch)):
            following = start + row + 1  # this position's logits score the next token
            if text.start < following < text.stop:
                pointer = llama_cpp.llama_get_logits_ith(ctx, row)
                logits = np.ctypeslib.as_array(pointer, shape=(n_vocab,)).astype(np.float64)
                logprobs[following] = _scores(logits, tokens[following], top)
    llm._requires_eval = True  # the completion that follows decodes the last prompt token again for its logits
    entries = []
    for index, (shown, raw) in enumerate(texts(vocab, tokens[text], prompt), start=text.start):
        logprob, alternatives = logprobs.get(index, (None, None))
        top_entries = None if alternatives is None else [_entry(vocab, t, value) for t, value in alternatives]
        entries.append({"token": shown, "logprob": logprob, "bytes": list(raw), "top_logprobs": top_entries})
    return entries


def _scores(logits: Any, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
    import numpy as np

    peak = logits.max()
    log_total = peak + np.log(np.exp(logits - peak).sum())
    best: list[tuple[int, float]] = []
    if top:
        count = min(top, logits.shape[0])
        chosen = np.argpartition(logits, -count)[-count:]
        best = [(int(t), float(logits[t] - log_total)) for t in sorted(chosen.tolist(), key=lambda t: -logits[t])]
    return float(logits[token] - log_total), best


def texts(vocab: Any, tokens: list[int], encoded: str) -> list[tuple[str, bytes]]:
    """Each token's text and bytes, so that the texts concatenate to ``encoded``, the text they encode: a character
    split over tokens belongs to the token that completes it, and a leading space the tokenizer added (SentencePiece's
    dummy prefix) is dropped."""
    raw = [piece(vocab, t) for t in tokens]
    joined = b"".join(raw)
    if raw and raw[0].startswith(b" ") and joined != encoded.encode() and joined[1:] == encoded.encode():
        raw[0] = raw[0][1:]
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    shown = [decoder.decode(b) for b in raw]
    if shown:
        shown[-1] += decoder.decode(b"", final=True)
    return list(zip(shown, raw, strict=True))


def piece(vocab: Any, token: int) -> bytes:
    """The bytes of one token (special tokens as their text)."""
    import llama_cpp

    size = 64
    while True:
        buffer = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_token_to_piece(vocab, token, buffer, size, 0, True)
        if n >= 0:
            return buffer.raw[:n]
        size = -n


def _entry(vocab: Any, token: int, logprob: float) -> dict[str, Any]:
    raw = piece(vocab, token)
    return {"token": raw.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(raw)}


def _counts(engine: LlamaEngine, prompt: int, finish_reason: str) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": 0, "finish_reason": finish_reason, "kv": engine.kv_usage()}
