"""One parallel sequence's reply text: token bytes in, text pieces out, ending at a stop string.

The same rules as the single worker's token loop (``reply_loop.ReplyLoop._pieces``), for a sequence that is fed
one token per batched step instead of pulling from ``llm.generate``: UTF-8 completed across tokens, the stops of
``reply_loop.Stops`` (a preset's counted only once the reply has visible text), and text that may still become a
stop held back until it cannot. No logprobs: a request that asks for them runs on the single worker.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field

from app.backends.llamacpp.reply_loop import Stops

_VISIBLE = re.compile(r"\S")


@dataclass
class SeqText:
    stops: Stops
    text: str = ""
    sent: int = 0  # characters of ``text`` already released
    visible_at: int | None = None
    stop_sequence: str | None = None
    stopped: bool = False  # a stop string matched: the reply ends
    _decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace")
    )

    def feed(self, raw: bytes) -> str:
        """Add one token's bytes; the text that may be shown now ("" while it waits, or after a stop)."""
        chars = self._decoder.decode(raw)
        start, self.text = len(self.text), self.text + chars
        if self.visible_at is None and (seen := _VISIBLE.search(chars)) is not None:
            self.visible_at = start + seen.start()
        found = self.stops.match(self.text, max(self.sent, start - self.stops.longest + 1), self.visible_at)
        if found is not None:
            at, stop = found
            self.stopped = True
            self.stop_sequence = stop if stop in self.stops.reported else None
            return self._release(at)
        return self._release(len(self.text) - self.stops.held(self.text, self.visible_at))

    def finish(self) -> str:
        """The reply ended without a stop string: whatever was held back."""
        return "" if self.stopped else self._release(len(self.text))

    def _release(self, upto: int) -> str:
        piece = self.text[self.sent : upto] if upto > self.sent else ""
        self.sent = max(self.sent, upto)
        return piece
