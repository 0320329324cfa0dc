"""Helper for the kill test: saves a user message, then streams a reply into the store until killed.

Usage: python conversation_writer.py DB_PATH. Prints "ready" once the user message is committed and "streaming"
after the third partial save of the reply; exits by itself after ten minutes if nobody kills it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from app.core.chat.conversation import Message, MessageStatus, Role
from app.services.chat.history import ConversationStore

LIFETIME_S = 600.0


def main(path: Path) -> None:
    store = ConversationStore(path)
    conversation = store.create("Killed mid-reply")
    assert conversation.id is not None
    store.append_message(conversation.id, Message(Role.USER, "Tell me a long story."))
    print("ready", flush=True)
    reply = store.append_message(conversation.id, Message(Role.ASSISTANT, "", MessageStatus.STREAMING))
    deadline = time.monotonic() + LIFETIME_S
    count = 0
    while time.monotonic() < deadline:
        count += 1
        reply.content += f"word{count} "
        store.update_message(reply)
        if count == 3:
            print("streaming", flush=True)
        time.sleep(0.005)
    store.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
