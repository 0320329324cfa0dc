"""A parallel sequence's text (``parallel_text.SeqText``): fed one token's bytes at a time, it shows text as soon as
it cannot become a stop, never shows a stop's start, ends at a stop with the text before it, passes over a preset's
stop before the reply's first visible text, and completes UTF-8 characters split across tokens."""

from __future__ import annotations

from app.backends.llamacpp.parallel_text import SeqText
from app.backends.llamacpp.reply_loop import Stops


def feed(text: SeqText, pieces: list[bytes]) -> list[str]:
    return [text.feed(piece) for piece in pieces]


def test_text_that_may_become_a_stop_waits_and_the_stop_never_shows():
    seq = SeqText(Stops(exact=("END",), reported=frozenset({"END"})))
    assert feed(seq, [b"Hello", b" E", b"N"]) == ["Hello", " ", ""]  # "EN" may still become "END"
    assert seq.feed(b"D and more") == ""
    assert seq.stopped and seq.stop_sequence == "END" and seq.text.startswith("Hello END")
    assert seq.finish() == ""


def test_a_near_miss_is_released_and_the_rest_comes_at_the_end():
    seq = SeqText(Stops(exact=("END",)))
    assert feed(seq, [b"EN", b"Dx"]) == ["", ""] and seq.stopped and seq.stop_sequence is None  # not a reported stop
    other = SeqText(Stops(exact=("END",)))
    assert feed(other, [b"EN", b"d", b" E"]) == ["", "ENd", " "]
    assert other.finish() == "E" and not other.stopped


def test_a_presets_stop_before_visible_text_is_passed_over():
    seq = SeqText(Stops(after_text=("\n\n",), reported=frozenset({"\n\n"})))
    assert feed(seq, [b"\n\n", b"Once"]) == ["\n\n", "Once"]  # before any visible text it cannot be a stop
    assert seq.feed(b" upon\n\nmore") == " upon" and seq.stop_sequence == "\n\n"


def test_utf8_split_across_tokens_is_completed():
    snowman = "☃".encode()
    seq = SeqText(Stops())
    assert feed(seq, [snowman[:1], snowman[1:]]) == ["", "☃"]
