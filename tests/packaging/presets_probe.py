"""What an installed copy of the app (a wheel's files, the bundle) lists as shipped presets, asked the way the
Modelfile page asks: its file list (``ModelfileFiles``) filled from ``shipped_presets_dir()``, offscreen."""

from __future__ import annotations

import json
from pathlib import Path

SOURCE_PRESETS = Path(__file__).resolve().parents[2] / "app" / "resources" / "modelfiles"

# Run as `python -c PROBE` (or the bundle's `llm-workstation -c PROBE`): prints one JSON line.
PROBE = """
import asyncio, json, tempfile
from pathlib import Path
from PySide6.QtWidgets import QApplication
import app
from app.services.presets import shipped_presets_dir
from app.ui.pages.modelfiles.files import ModelfileFiles

qt = QApplication([])
files = ModelfileFiles(Path(tempfile.mkdtemp()), shipped_presets_dir(), str)
asyncio.run(files.refresh())
root = files.preset_root
listed = [root.child(i).text(0) for i in range(root.childCount())]
print(json.dumps({"app": app.__file__, "presets_dir": str(shipped_presets_dir()), "listed": listed}))
"""


def source_preset_names() -> list[str]:
    """The presets in the source tree, in the page's order (case-insensitive by name)."""
    names = [p.name for p in SOURCE_PRESETS.glob("*.Modelfile")]
    assert len(names) >= 5, f"no presets in {SOURCE_PRESETS}"
    return sorted(names, key=str.lower)


def probe_result(stdout: str) -> dict[str, object]:
    """The probe's JSON line (the last line of stdout; Qt may print before it)."""
    return json.loads(stdout.strip().splitlines()[-1])
