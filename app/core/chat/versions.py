"""Versions of a message: Regenerate and Edit keep what they replace, and each place can be browsed (‹ 2/3 ›).

The data model, kept to two fields of ``Message``:

- A chat's *path*, ``Conversation.messages``, is what shows and what the model is sent.
- Where a message was regenerated or edited, the path's message at that place holds the place's *other* versions
  in ``versions``, each a *branch*: that version of the message followed by the messages that came after it
  while it was shown (a regenerated last reply has none; an edited question keeps its old answers and everything
  after them). ``version`` is the shown message's slot among all of them (0-based): ``‹ version+1 / count ›``.
- Switching a place to another version swaps the tail: the path from that place becomes the chosen branch, and the
  branch it replaces goes back into its slot. So choosing an earlier version of a question brings back the
  whole conversation that followed it.
- Branches nest: a message inside a kept branch may hold versions of a later place. The head of a kept branch
  holds none (the place's versions are always on the path's message).
"""

from __future__ import annotations

import dataclasses

from app.core.chat.conversation import Message

Branch = list[Message]


def version_count(message: Message) -> int:
    """How many versions the place of ``message`` has (1: no other)."""
    return len(message.versions) + 1


def other_slots(message: Message) -> list[tuple[int, Branch]]:
    """(slot, branch) of each version the message's place holds besides the shown one, in slot order."""
    slots = [slot for slot in range(version_count(message)) if slot != message.version]
    return list(zip(slots, message.versions, strict=True))


def branches(path: list[Message], index: int) -> list[Branch]:
    """Every version of place ``index``, in slot order, the shown one as the path's tail (its head bare)."""
    head = path[index]
    shown = [_bare(head), *path[index + 1 :]]
    return [*head.versions[: head.version], shown, *head.versions[head.version :]]


def switched(path: list[Message], index: int, slot: int) -> Branch:
    """The tail from ``index`` once place ``index`` shows version ``slot`` (0-based): that branch, its head
    holding the other versions (the one shown before among them)."""
    every = branches(path, index)
    if not 0 <= slot < len(every):
        raise IndexError(f"place {index} has versions 1 to {len(every)}, not {slot + 1}")
    chosen = every[slot]
    head = dataclasses.replace(chosen[0], versions=every[:slot] + every[slot + 1 :], version=slot)
    return [head, *chosen[1:]]


def superseded(path: list[Message], index: int, new: Message) -> Message:
    """``new`` as the newest version of place ``index``: it holds every version there (the tail from ``index``
    kept as one of them) and shows as the last slot. The path's tail from ``index`` is to be replaced by it."""
    every = branches(path, index)
    new.versions, new.version = every, len(every)
    return new


def _bare(message: Message) -> Message:
    return dataclasses.replace(message, versions=[], version=0)
