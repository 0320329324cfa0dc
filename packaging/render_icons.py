"""Render the app icon (app/resources/icons/llm-workstation.svg) into the PNG sizes a desktop needs, a Windows
.ico and a macOS .icns. Run after changing the SVG; the outputs are committed.

    .venv/bin/python packaging/render_icons.py
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SVG = ROOT / "app" / "resources" / "icons" / "llm-workstation.svg"
PNG_DIR = SVG.parent
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# ICNS element types holding PNG data, by pixel size (Apple's icns format).
ICNS_TYPES = {16: b"icp4", 32: b"icp5", 64: b"icp6", 128: b"ic07", 256: b"ic08", 512: b"ic09"}


def png_path(size: int) -> Path:
    return PNG_DIR / f"llm-workstation-{size}.png"


def render_png(size: int) -> bytes:
    """The SVG drawn at size×size with antialiasing, as PNG bytes."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        raise SystemExit(f"{SVG}: not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(0)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")  # type: ignore[call-overload]  # the stubs want bytes; the runtime wants str
    return bytes(data.data())


def ico_bytes(pngs: dict[int, bytes]) -> bytes:
    """A .ico whose images are PNG-compressed (Windows Vista and later read these)."""
    header = struct.pack("<HHH", 0, 1, len(pngs))
    offset = 6 + 16 * len(pngs)
    entries, blobs = b"", b""
    for size, png in sorted(pngs.items()):
        dim = 0 if size >= 256 else size  # 0 means 256 in an ICONDIRENTRY
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(png), offset)
        blobs += png
        offset += len(png)
    return header + entries + blobs


def icns_bytes(pngs: dict[int, bytes]) -> bytes:
    body = b"".join(kind + struct.pack(">I", 8 + len(pngs[size])) + pngs[size] for size, kind in ICNS_TYPES.items())
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 (QImage/QPainter need one)
    pngs = {size: render_png(size) for size in sorted(set(PNG_SIZES) | set(ICO_SIZES) | set(ICNS_TYPES))}
    for size in PNG_SIZES:
        png_path(size).write_bytes(pngs[size])
    (ROOT / "packaging" / "windows" / "llm-workstation.ico").write_bytes(ico_bytes({s: pngs[s] for s in ICO_SIZES}))
    (ROOT / "packaging" / "macos" / "llm-workstation.icns").write_bytes(icns_bytes(pngs))
    print(f"rendered {len(PNG_SIZES)} PNGs, an .ico and an .icns from {SVG.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
