"""Render the README screenshot: the real window, the starter model, one real exchange, offscreen.

.venv/bin/python scripts/demo_screenshot.py docs/screenshot.png
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile

os.environ["QT_QPA_PLATFORM"] = "offscreen"
os.environ.setdefault("LLMW_HOME", tempfile.mkdtemp(prefix="llmw-demo-"))

PROMPT = "Write a short Python function that reverses a string, with an example."


async def _demo(window, out: str) -> None:
    panel = window.chat_panel
    await panel.start()
    panel.sampling.max_tokens.setValue(160)
    panel.sampling.seed.setValue(7)
    panel.sampling.temperature.setValue(0.3)
    await panel._use_starter()
    panel.input.setPlainText(PROMPT)
    panel.send()
    while panel.session is None or len(panel.session.conversation.messages) < 2 or panel.session.generating:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    window.grab().save(out)
    await panel.shutdown()


def main() -> int:
    import qasync
    from PySide6.QtWidgets import QApplication

    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.ui.context import AppContext
    from app.ui.main_window import MainWindow

    app = QApplication([])
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    window = MainWindow(AppContext.create(app_paths().ensure(), install_logging("INFO", None)))
    window.resize(1280, 820)
    window.show()
    with loop:
        loop.run_until_complete(_demo(window, sys.argv[1] if len(sys.argv) > 1 else "screenshot.png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
