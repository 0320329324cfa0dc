"""The app's icon set: small stroke SVGs drawn for this app, recoloured from the palette so they read in light and
dark alike. ``icon("send")`` is a QIcon in the palette's button-text colour (its disabled state greyed)."""

from __future__ import annotations

from functools import lru_cache

from PySide6.QtCore import QByteArray, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QIconEngine, QPainter, QPalette, QPixmap
from PySide6.QtSvg import QSvgRenderer

# 24×24, stroke only; "currentColor" is replaced by the palette colour.
_PATHS: dict[str, str] = {
    "chat": '<path d="M4 5h16v11H9l-5 4z"/>',
    "models": '<path d="M12 3l8 4.5v9L12 21l-8-4.5v-9z"/><path d="M4 7.5l8 4.5 8-4.5M12 12v9"/>',
    "modelfiles": '<path d="M6 3h9l4 4v14H6z"/><path d="M15 3v4h4M9 12h7M9 16h7"/>',
    "batch": '<path d="M12 3l9 5-9 5-9-5z"/><path d="M3 13l9 5 9-5"/>',
    "bench": '<path d="M4 18a8 8 0 1 1 16 0"/><path d="M12 18l4-6"/>',
    "monitor": '<path d="M3 12h4l3-7 4 14 3-7h4"/>',
    "documents": '<path d="M8 3h8l4 4v11H8z"/><path d="M16 3v4h4M5 7v14h11M11 11h6M11 14h6"/>',  # a stack of pages
    "server": '<rect x="4" y="4" width="16" height="6" rx="1"/><rect x="4" y="14" width="16" height="6" rx="1"/>'
    '<path d="M8 7h.01M8 17h.01"/>',
    "vllm": '<path d="M13 3L5 14h6l-1 7 8-11h-6z"/>',  # a bolt: the fast serving engine
    "api": '<path d="M9 3v5M15 3v5M6 8h12v3a6 6 0 0 1-12 0zM12 17v4"/>',  # a plug: other programs connect here
    "settings": '<path d="M4 6h10M18 6h2M4 12h4M12 12h8M4 18h12M20 18h0"/>'
    '<circle cx="16" cy="6" r="2"/><circle cx="10" cy="12" r="2"/><circle cx="18" cy="18" r="2"/>',
    "send": '<path d="M12 19V5M6 11l6-6 6 6"/>',
    "stop": '<rect x="6" y="6" width="12" height="12" rx="2"/>',
    "copy": '<rect x="8" y="8" width="12" height="12" rx="2"/><path d="M16 8V5a1 1 0 0 0-1-1H5a1 1 0 0 0-1 1v10'
    'a1 1 0 0 0 1 1h3"/>',
    "edit": '<path d="M4 20h4L19 9l-4-4L4 16z"/><path d="M13 7l4 4"/>',
    "regenerate": '<path d="M20 11a8 8 0 0 0-14-5l-2 2M4 4v4h4M4 13a8 8 0 0 0 14 5l2-2M20 20v-4h-4"/>',
    "continue": '<path d="M5 12h12M13 6l6 6-6 6"/>',
    "fork": '<circle cx="6" cy="5" r="2"/><circle cx="18" cy="5" r="2"/><circle cx="12" cy="19" r="2"/>'
    '<path d="M6 7v2a4 4 0 0 0 4 4h4a4 4 0 0 0 4-4V7M12 13v4"/>',
    "plus": '<path d="M12 5v14M5 12h14"/>',
    "image": '<rect x="3" y="5" width="18" height="14" rx="2"/><circle cx="9" cy="10" r="1.5"/>'
    '<path d="M21 16l-5-5-8 8"/>',
    "trash": '<path d="M4 7h16M10 11v6M14 11v6M6 7l1 13h10l1-13M9 7V4h6v3"/>',
    "search": '<circle cx="11" cy="11" r="6"/><path d="M20 20l-4.5-4.5"/>',
    "folder": '<path d="M3 6h6l2 2h10v11H3z"/>',
    "download": '<path d="M12 4v11M7 10l5 5 5-5M5 20h14"/>',
    "play": '<path d="M7 5l12 7-12 7z"/>',
    "pause": '<path d="M8 5v14M16 5v14"/>',
    "check": '<path d="M5 12l5 5 9-10"/>',
    "close": '<path d="M6 6l12 12M18 6L6 18"/>',
    "info": '<circle cx="12" cy="12" r="9"/><path d="M12 11v6M12 7.5v.01"/>',
    "warning": '<path d="M12 3l10 18H2z"/><path d="M12 10v5M12 18v.01"/>',
    "error": '<circle cx="12" cy="12" r="9"/><path d="M9 9l6 6M15 9l-6 6"/>',
    "chevron-down": '<path d="M6 9l6 6 6-6"/>',
    "chevron-right": '<path d="M9 6l6 6-6 6"/>',
    "chevron-left": '<path d="M15 6l-6 6 6 6"/>',
    "sidebar": '<rect x="3" y="4" width="18" height="16" rx="2"/><path d="M9 4v16"/>',
    "cpu": '<rect x="7" y="7" width="10" height="10" rx="1"/><path d="M10 3v4M14 3v4M10 17v4M14 17v4M3 10h4M3 14h4'
    'M17 10h4M17 14h4"/>',
    "spark": '<path d="M12 3l2 6 6 2-6 2-2 6-2-6-6-2 6-2z"/>',
    "refresh": '<path d="M20 11a8 8 0 1 0-2 5.3M20 4v7h-7"/>',
    "external": '<path d="M14 4h6v6M20 4l-9 9M18 14v6H4V6h6"/>',
}

_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="currentColor" '
    'stroke-width="{width}" stroke-linecap="round" stroke-linejoin="round">{body}</svg>'
)


def icon_names() -> list[str]:
    return sorted(_PATHS)


def svg_text(name: str, color: str, width: float = 1.8) -> str:
    return _SVG.format(width=width, body=_PATHS[name]).replace("currentColor", color)


@lru_cache(maxsize=512)
def _pixmap(name: str, color: str, size: int, ratio: float) -> QPixmap:
    renderer = QSvgRenderer(QByteArray(svg_text(name, color).encode()))
    pixmap = QPixmap(int(size * ratio), int(size * ratio))
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    renderer.render(painter, QRectF(0, 0, size * ratio, size * ratio))
    painter.end()
    pixmap.setDevicePixelRatio(ratio)
    return pixmap


def icon(name: str, color: QColor | None = None, sizes: tuple[int, ...] = (16, 20, 24)) -> QIcon:
    """The named icon in ``color``, greyed when disabled. With no colour it is drawn in the application palette's
    button text of the moment, so it follows a theme switch by itself; one in a given colour is redrawn by its
    owner when the palette changes."""
    if color is None:
        return QIcon(PaletteIconEngine(name))
    palette = QGuiApplication.palette()
    disabled = palette.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText)
    ratio = max(1.0, _device_ratio())
    result = QIcon()
    for size in sizes:
        result.addPixmap(_pixmap(name, color.name(), size, ratio), QIcon.Mode.Normal)
        result.addPixmap(_pixmap(name, disabled.name(), size, ratio), QIcon.Mode.Disabled)
    return result


class PaletteIconEngine(QIconEngine):
    """Draws an icon of the set at the size asked for, in the colour the application palette gives now."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def scaledPixmap(self, size: QSize, mode: QIcon.Mode, state: QIcon.State, scale: float) -> QPixmap:
        group = QPalette.ColorGroup.Disabled if mode == QIcon.Mode.Disabled else QPalette.ColorGroup.Normal
        colour = QGuiApplication.palette().color(group, QPalette.ColorRole.ButtonText)
        return _pixmap(self.name, colour.name(), max(1, min(size.width(), size.height())), max(1.0, scale))

    def pixmap(self, size: QSize, mode: QIcon.Mode, state: QIcon.State) -> QPixmap:
        return self.scaledPixmap(size, mode, state, _device_ratio())

    def paint(self, painter: QPainter, rect: QRect, mode: QIcon.Mode, state: QIcon.State) -> None:
        ratio = painter.device().devicePixelRatioF() if painter.device() is not None else 1.0
        painter.drawPixmap(rect, self.scaledPixmap(rect.size(), mode, state, ratio))

    def clone(self) -> QIconEngine:
        return PaletteIconEngine(self.name)

    def key(self) -> str:
        return "llmw-palette-icon"


def icon_size(px: int = 18) -> QSize:
    return QSize(px, px)


def _device_ratio() -> float:
    screen = QGuiApplication.primaryScreen()
    return float(screen.devicePixelRatio()) if screen is not None else 1.0
