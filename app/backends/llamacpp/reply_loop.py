"""The app's own token loop on a loaded ``Llama``, in place of ``create_completion``'s: the tokens of
``llm.generate`` (its prefix cache, and a grammar sampler made afresh for every request) turned into text pieces
that end at the model's end of generation, at ``max_tokens`` or at a stop string — saying which stop matched,
which llama-cpp-python does not.

- **Stops**: ``Stops.exact`` end the reply wherever they match (a client's own stops, the chat format's turn end);
  ``Stops.after_text`` (a preset's) only once the reply has visible text: one the model writes before its first
  word is passed over, so a preset's ``\\n\\n`` cannot turn a reply into "". While streaming, whole tokens wait
  while the text ends with what may be the start of a stop.
- **Logprobs**: each piece comes with its tokens' entries when asked; their ``token`` texts join to exactly the
  piece (the same detokenization, UTF-8 completed across tokens; the token a stop cuts is cut with it).
- **Seeds**: a request without one gets a fresh random seed. llama-cpp-python derives it from the previous
  request's seed, so every unseeded reply depended on the requests sent before it.

Only the worker imports this module; ``llama_cpp`` is imported on first use.
"""

from __future__ import annotations

import codecs
import re
import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from app.backends.llamacpp.logprobs import LogprobRecorder

_VISIBLE = re.compile(r"\S")
# llama-cpp-python's sampling arguments that ``Llama.generate`` takes (``temperature`` is its ``temp``)
_GENERATE_ARGS = ("top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "frequency_penalty", "presence_penalty",
                  "tfs_z", "mirostat_mode", "mirostat_tau", "mirostat_eta", "logits_processor",
                  "stopping_criteria", "grammar")  # fmt: skip


@dataclass(frozen=True)
class Stops:
    """The stop strings of one reply; ``reported``: those a match of which the reply names as its
    ``stop_sequence`` (what the request or its preset asked, not the chat format's own turn end)."""

    exact: tuple[str, ...] = ()
    after_text: tuple[str, ...] = ()
    reported: frozenset[str] = frozenset()

    @property
    def longest(self) -> int:
        return max(map(len, self.exact + self.after_text), default=0)

    def match(self, text: str, start: int, visible_at: int | None) -> tuple[int, str] | None:
        """The first stop in ``text`` at or after ``start`` that counts: (where, which)."""
        found: list[tuple[int, str]] = []
        for stop in self.exact:
            if (at := text.find(stop, start)) >= 0:
                found.append((at, stop))
        if visible_at is not None:  # before the first visible character, a preset's stop does not count
            for stop in self.after_text:
                if (at := text.find(stop, max(start, visible_at + 1))) >= 0:
                    found.append((at, stop))
        return min(found, key=lambda f: (f[0], -len(f[1]))) if found else None

    def held(self, text: str, visible_at: int | None) -> int:
        """How many characters at the end of ``text`` may still become a stop that counts (they wait)."""
        most = 0
        for stop, counts_from in [(s, -1) for s in self.exact] + [(s, visible_at) for s in self.after_text]:
            if counts_from is None:
                continue
            for size in range(min(len(stop) - 1, len(text)), most, -1):
                if len(text) - size > counts_from and text.endswith(stop[:size]):
                    most = size
                    break
        return most


@dataclass
class _Token:
    end: int  # where its text ends in the reply's text
    entry: dict[str, Any] | None  # its logprob entry, when asked


@dataclass
class ReplyLoop:
    """One reply: ``chunks(...)`` yields llama-cpp-python's completion chunks (text pieces, then one with the
    finish reason); ``take_logprobs()`` gives the entries of the pieces yielded since it was last asked (None when
    not asked); ``finish_reason`` and ``stop_sequence`` say how the reply ended."""

    llm: Any
    recorder: LogprobRecorder | None = None
    finish_reason: str = "length"
    stop_sequence: str | None = None
    _taken: list[dict[str, Any]] = field(default_factory=list)
    _prompt_length: int = 0

    def take_logprobs(self) -> list[dict[str, Any]] | None:
        if self.recorder is None:
            return None
        taken, self._taken = self._taken, []
        return taken

    def chunks(
        self, prompt: list[int] | str, stops: Stops, *, max_tokens: int | None = None, seed: int | None = None,
        temperature: float = 0.8, **sampling: Any,
    ) -> Iterator[dict[str, Any]]:  # fmt: skip
        """The reply to ``prompt`` (tokens, or text tokenized as llama-cpp-python does); ``sampling`` takes
        ``create_completion``'s arguments (those this loop has no use for are ignored)."""
        llm = self.llm
        tokens = self._prompt_tokens(prompt)
        self._prompt_length = len(tokens)
        limit = self._limit(len(tokens), max_tokens)
        llm.set_seed(seed if seed is not None else secrets.randbits(32))
        arguments = {key: sampling[key] for key in _GENERATE_ARGS if sampling.get(key) is not None}
        head = {"id": f"cmpl-{uuid.uuid4()}", "object": "text_completion", "created": int(time.time()),
                "model": llm.model_path}  # fmt: skip
        for piece in self._pieces(llm.generate(tokens, temp=temperature, **arguments), stops, limit):
            yield {**head, "choices": [{"text": piece, "index": 0, "logprobs": None, "finish_reason": None}]}
        yield {**head, "choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": self.finish_reason}]}

    def _prompt_tokens(self, prompt: list[int] | str) -> list[int]:
        llm = self.llm
        tokens = list(prompt) if not isinstance(prompt, str) else llm.tokenize(prompt.encode("utf-8"), special=True)
        tokens = tokens or [llm.token_bos()]
        if len(tokens) >= llm.n_ctx():  # llama-cpp-python's words: the engine reads the figures from them
            raise ValueError(f"Requested tokens ({len(tokens)}) exceed context window of {llm.n_ctx()}")
        return tokens

    def _limit(self, prompt_tokens: int, max_tokens: int | None) -> int:
        room = int(self.llm.n_ctx()) - prompt_tokens
        return room if max_tokens is None or max_tokens <= 0 else min(max_tokens, room)

    def _pieces(self, sampled: Iterator[int], stops: Stops, limit: int) -> Iterator[str]:
        """The reply's text as it may be shown, piece by piece (whole tokens; a stop's tokens never)."""
        import llama_cpp

        llm, vocab = self.llm, self.llm._model.vocab
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text, visible_at, sent = "", None, 0
        waiting: list[_Token] = []
        for count, token in enumerate(sampled, 1):
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                self.finish_reason = "stop"
                break
            raw = bytes(llm.detokenize([token]))
            chars = decoder.decode(raw)
            start, text = len(text), text + chars
            waiting.append(_Token(len(text), self._entry(token, chars, raw, count)))
            if visible_at is None and (seen := _VISIBLE.search(chars)) is not None:
                visible_at = start + seen.start()
            if (found := stops.match(text, max(sent, start - stops.longest + 1), visible_at)) is not None:
                at, stop = found
                self.finish_reason, self.stop_sequence = "stop", stop if stop in stops.reported else None
                if piece := self._release(waiting, text, sent, at, cut=True):
                    yield piece
                return
            if piece := self._release(waiting, text, sent, len(text) - stops.held(text, visible_at)):
                sent += len(piece)
                yield piece
            if count >= limit:
                break
        else:  # generate ended by itself: the chat format's stopping criteria (or Stop, which the engine says)
            self.finish_reason = "stop"
        if piece := self._release(waiting, text, sent, len(text), cut=True):
            yield piece

    def _release(self, waiting: list[_Token], text: str, sent: int, upto: int, *, cut: bool = False) -> str:
        """The text of the waiting tokens that end by ``upto`` (whole tokens), now released; with ``cut`` the token
        ``upto`` falls in is released too, cut there, and the rest dropped (the reply ends at ``upto``)."""
        ready = [t for t in waiting if t.end <= upto]
        if cut and len(ready) < len(waiting) and upto > (end := ready[-1].end if ready else sent):
            partial = waiting[len(ready)]
            if partial.entry is not None:
                kept = text[end:upto]
                partial.entry.update(token=kept, bytes=list(kept.encode("utf-8")))
            ready.append(_Token(upto, partial.entry))
        del waiting[: len(waiting) if cut else len(ready)]
        self._taken += [t.entry for t in ready if t.entry is not None]
        return text[sent : ready[-1].end] if ready else ""

    def _entry(self, token: int, chars: str, raw: bytes, count: int) -> dict[str, Any] | None:
        """The ``count``-th token's logprob entry, with the text it added to the reply (its ``bytes``: all it
        decodes to). Its logits are those of the position before it, counted from the end of the batch last
        evaluated: the last row without speculation, an earlier one when drafts were evaluated after it."""
        if self.recorder is None:
            return None
        speculating = getattr(self.llm, "draft_model", None) is not None
        row = self._prompt_length + count - 2 - int(self.llm.n_tokens) if speculating else -1
        self.recorder.record(token, row=row)
        (entry,) = self.recorder.take()
        entry.update(token=chars, bytes=list(raw))
        return entry
