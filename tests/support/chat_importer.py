"""Helper for the import-kill test: imports a chat file in small committed batches, slowly, until killed.

Usage: python chat_importer.py DB_PATH FILE. Prints "stored N" after each committed batch.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from app.services.chat.exchange import import_file
from app.services.chat.history import ConversationStore


def main(db: Path, source: Path) -> None:
    def progress(done: int, total: int) -> None:
        print(f"stored {done}", flush=True)
        time.sleep(0.05)  # a slow import: the kill lands between batches or inside one

    with ConversationStore(db) as store:
        import_file(store, source, progress=progress, batch=10)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
