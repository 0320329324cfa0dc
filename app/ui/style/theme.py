"""The visual system in one place: light and dark palettes (Fusion), colour tokens derived from the palette, the
spacing scale and one app-wide style sheet. Widgets set roles (``setProperty("role", "muted")``) instead of
styling themselves."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory, QWidget

THEMES = ("system", "light", "dark")

# spacing scale (px) and radii
SPACE_XS, SPACE_S, SPACE_M, SPACE_L, SPACE_XL = 4, 8, 12, 16, 24
RADIUS = 6
RADIUS_CARD = 10


@dataclass(frozen=True)
class Tokens:
    """Colours every page uses, for one palette."""

    dark: bool
    text: QColor
    muted: QColor
    base: QColor
    window: QColor
    surface: QColor  # cards, bubbles
    sidebar: QColor
    border: QColor
    hover: QColor
    accent: QColor
    accent_soft: QColor
    on_accent: QColor
    info: QColor
    info_bg: QColor
    warning: QColor
    warning_bg: QColor
    error: QColor
    error_bg: QColor
    success: QColor
    success_bg: QColor
    code_bg: QColor


def mix(a: QColor, b: QColor, amount: float) -> QColor:
    """``a`` moved ``amount`` (0..1) of the way to ``b``."""
    return QColor(
        round(a.red() + (b.red() - a.red()) * amount),
        round(a.green() + (b.green() - a.green()) * amount),
        round(a.blue() + (b.blue() - a.blue()) * amount),
    )


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def tokens(palette: QPalette | None = None) -> Tokens:
    palette = palette or QGuiApplication.palette()
    dark = is_dark(palette)
    text = palette.color(QPalette.ColorRole.Text)
    base = palette.color(QPalette.ColorRole.Base)
    window = palette.color(QPalette.ColorRole.Window)
    accent = palette.color(QPalette.ColorRole.Highlight)
    semantic = _DARK_SEMANTIC if dark else _LIGHT_SEMANTIC
    return Tokens(
        dark=dark,
        text=text,
        muted=mix(text, base, 0.42),
        base=base,
        window=window,
        surface=mix(base, text, 0.04 if not dark else 0.06),
        sidebar=mix(window, text, 0.03),
        border=mix(base, text, 0.16),
        hover=mix(base, text, 0.08),
        accent=accent,
        accent_soft=mix(base, accent, 0.22),
        on_accent=palette.color(QPalette.ColorRole.HighlightedText),
        code_bg=mix(base, text, 0.07),
        **{name: QColor(value) for name, value in semantic.items()},
    )


_LIGHT_SEMANTIC = {
    "info": "#1d4ed8", "info_bg": "#e8f0fe", "warning": "#8a5300", "warning_bg": "#fff4d6",
    "error": "#b42318", "error_bg": "#fdecea", "success": "#137333", "success_bg": "#e6f4ea",
}  # fmt: skip
_DARK_SEMANTIC = {
    "info": "#8ab4f8", "info_bg": "#1b2a44", "warning": "#fdd663", "warning_bg": "#3a2f12",
    "error": "#f28b82", "error_bg": "#3c1d1b", "success": "#81c995", "success_bg": "#16301f",
}  # fmt: skip


def _palette(dark: bool) -> QPalette:
    colours = {
        QPalette.ColorRole.Window: "#1f2023" if dark else "#f4f5f7",
        QPalette.ColorRole.WindowText: "#e8e9ec" if dark else "#1c1d21",
        QPalette.ColorRole.Base: "#26272b" if dark else "#ffffff",
        QPalette.ColorRole.AlternateBase: "#2c2d31" if dark else "#f7f8fa",
        QPalette.ColorRole.Text: "#e8e9ec" if dark else "#1c1d21",
        QPalette.ColorRole.Button: "#2f3035" if dark else "#ffffff",
        QPalette.ColorRole.ButtonText: "#e8e9ec" if dark else "#1c1d21",
        QPalette.ColorRole.Highlight: "#5b8def" if dark else "#2f6fe4",
        QPalette.ColorRole.HighlightedText: "#ffffff",
        QPalette.ColorRole.ToolTipBase: "#2f3035" if dark else "#ffffff",
        QPalette.ColorRole.ToolTipText: "#e8e9ec" if dark else "#1c1d21",
        QPalette.ColorRole.PlaceholderText: "#8b8d94" if dark else "#8a8d96",
        QPalette.ColorRole.Link: "#8ab4f8" if dark else "#1a56c8",
        QPalette.ColorRole.Mid: "#45474d" if dark else "#c9ccd3",
        QPalette.ColorRole.Dark: "#141517" if dark else "#a0a3ab",
        QPalette.ColorRole.Light: "#3a3b40" if dark else "#ffffff",
    }
    palette = QPalette()
    for role, value in colours.items():
        palette.setColor(role, QColor(value))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6d6f76" if dark else "#a4a7ae"))
    return palette


def apply_theme(app: QApplication, theme: str = "system", with_style_sheet: bool = True) -> None:
    """Our light or dark palette ("system": the platform's palette) and the app's style sheet, on Fusion.

    Fusion is set once (:func:`use_fusion`); a live switch changes only the palette and the sheet: replacing the
    style under a built window deleted the old one while widgets still used it, which crashed the app.
    At start-up the sheet comes after the window is built (``apply_style_sheet``): with an application style sheet
    set, every widget added to a layout re-polishes its whole subtree, which made building the window ~1.5× slower.
    """
    use_fusion(app)
    if theme in ("light", "dark"):
        app.setPalette(_palette(theme == "dark"))
    else:  # back to the platform's palette (an empty one resolves to it), also after a live switch
        app.setPalette(QPalette())
    if with_style_sheet:
        apply_style_sheet(app)


_FUSION_SET = "llmw_fusion_set"


def use_fusion(app: QApplication) -> None:
    """The Fusion style, set on the first call only."""
    if app.property(_FUSION_SET):
        return
    app.setStyle(QStyleFactory.create("Fusion"))
    app.setProperty(_FUSION_SET, True)


def apply_style_sheet(app: QApplication) -> None:
    """The app's style sheet, for the palette set now."""
    app.setStyleSheet(style_sheet(tokens(app.palette())))


def style_sheet(t: Tokens) -> str:
    """One style sheet for the app; roles pick the variant (``role="muted"``, ``role="section"`` …)."""
    c = {name: value.name() for name, value in t.__dict__.items() if isinstance(value, QColor)}
    return f"""
QWidget {{ font-size: 10pt; }}
QPushButton {{ padding: 5px 12px; border: 1px solid {c["border"]}; border-radius: {RADIUS}px;
    background: {c["base"]}; }}
QPushButton:hover {{ background: {c["hover"]}; }}
QPushButton:disabled {{ color: {c["muted"]}; }}
QPushButton[role="accent"] {{ background: {c["accent"]}; color: {c["on_accent"]}; border-color: {c["accent"]}; }}
QPushButton[role="accent"]:disabled {{ background: {c["hover"]}; border-color: {c["border"]}; color: {c["muted"]}; }}
QToolButton {{ border: none; border-radius: {RADIUS}px; padding: 4px; }}
QToolButton:hover {{ background: {c["hover"]}; }}
QToolButton:checked {{ background: {c["accent_soft"]}; }}
QLineEdit, QPlainTextEdit, QTextEdit {{
    border: 1px solid {c["border"]}; border-radius: {RADIUS}px; padding: 3px 6px; background: {c["base"]}; }}
QLineEdit:focus, QPlainTextEdit:focus, QTextEdit:focus {{ border: 2px solid {c["accent"]}; padding: 2px 5px; }}
{focus_rules(c)}QLabel[role="title"] {{ font-size: 15pt; font-weight: 600; }}
QLabel[role="section"] {{ font-size: 11pt; font-weight: 600; padding-top: 4px; }}
QLabel[role="muted"] {{ color: {c["muted"]}; }}
QLabel[role="empty-title"] {{ font-size: 13pt; font-weight: 600; }}
QFrame[role="card"] {{ background: {c["surface"]}; border: 1px solid {c["border"]}; border-radius: {RADIUS_CARD}px; }}
QFrame[role="drawer"] {{ background: {c["window"]}; border-left: 1px solid {c["border"]}; }}
QListWidget#nav {{ border: none; background: {c["sidebar"]}; outline: 0; }}
QListWidget#nav::item {{ padding: 7px 8px; border-radius: {RADIUS}px; margin: 1px 6px; }}
QListWidget#nav::item:selected {{ background: {c["accent_soft"]}; color: {c["text"]}; }}
QListWidget#nav::item:hover:!selected {{ background: {c["hover"]}; }}
QTabWidget::pane {{ border: none; border-top: 1px solid {c["border"]}; }}
QTabBar::tab {{ padding: 6px 14px; border: none; border-bottom: 2px solid transparent; }}
QTabBar::tab:selected {{ border-bottom: 2px solid {c["accent"]}; }}
QTabBar::tab:hover:!selected {{ background: {c["hover"]}; }}
QStatusBar {{ border-top: 1px solid {c["border"]}; }}
QToolTip {{ border: 1px solid {c["border"]}; padding: 4px; }}
QGroupBox {{ border: 1px solid {c["border"]}; border-radius: {RADIUS_CARD}px; margin-top: 14px; padding-top: 6px; }}
QGroupBox::title {{ subcontrol-origin: margin; left: 10px; padding: 0 4px; font-weight: 600; }}
QListWidget[role="sections"] {{ border: none; border-right: 1px solid {c["border"]}; background: {c["window"]};
    outline: 0; }}
QListWidget[role="sections"]::item {{ padding: 6px 8px; border-radius: {RADIUS}px; margin: 1px 6px; }}
QListWidget[role="sections"]::item:selected {{ background: {c["accent_soft"]}; color: {c["text"]}; }}
QListWidget[role="sections"]::item:hover:!selected {{ background: {c["hover"]}; }}
QFrame[role="footer"] {{ border: none; border-top: 1px solid {c["border"]}; }}
QLabel[role="badge"] {{ background: {c["success_bg"]}; color: {c["success"]}; border: 1px solid {c["success"]};
    border-radius: 8px; padding: 0px 7px; font-size: 9pt; font-weight: 600; }}
QLabel[role="fits"] {{ color: {c["success"]}; font-weight: 600; }}
QLabel[role="tight"] {{ color: {c["warning"]}; font-weight: 600; }}
QLabel[role="wont-fit"] {{ color: {c["error"]}; font-weight: 600; }}
QToolButton[role="disclosure"] {{ font-weight: 600; padding: 4px 2px; }}
QLabel[role="error"] {{ color: {c["error"]}; }}
QFrame#example_chip:hover, QFrame#example_chip:focus {{ background: {c["hover"]}; border-color: {c["accent"]}; }}
QFrame#chat_drawer {{ border: none; border-left: 1px solid {c["border"]}; }}
"""


def focus_rules(c: dict[str, str]) -> str:
    """A visible focus ring, in the accent colour, on every control that takes focus (both palettes): 2 px where
    the control has its own frame, the 1 px transparent frame of the others turned accent. Sizes do not change."""
    accent, text = c["accent"], c["text"]
    return f"""
QPushButton:focus {{ border: 2px solid {accent}; padding: 4px 11px; }}
QPushButton[role="accent"]:focus {{ border: 2px solid {text}; }}
QToolButton:focus {{ border: 2px solid {accent}; padding: 2px; }}
QComboBox:focus {{ border: 2px solid {accent}; border-radius: {RADIUS}px; padding: 1px 4px; }}
QCheckBox, QRadioButton {{ border: 1px solid transparent; border-radius: {RADIUS}px; padding: 1px 3px; }}
QCheckBox:focus, QRadioButton:focus {{ border-color: {accent}; }}
QSlider {{ border: 1px solid transparent; border-radius: {RADIUS}px; }}
QSlider:focus {{ border-color: {accent}; }}
QAbstractItemView:focus {{ border: 2px solid {accent}; }}
QListWidget#nav::item:focus, QListWidget[role="sections"]::item:focus {{ border: 2px solid {accent}; }}
QTabBar::tab:focus {{ border: 2px solid {accent}; border-radius: {RADIUS}px; }}
"""


def set_role(widget: QWidget, role: str) -> QWidget:
    """Give a widget a style role and re-polish it (roles can change at run time)."""
    widget.setProperty("role", role)
    style = widget.style()
    style.unpolish(widget)
    style.polish(widget)
    return widget
