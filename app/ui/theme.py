"""Light and dark themes: one palette each, turned into a QPalette and one style sheet."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

__all__ = ["Palette", "LIGHT", "DARK", "resolve", "apply_theme"]


@dataclass(frozen=True)
class Palette:
    name: str
    window: str  # the conversation background
    sidebar: str
    surface: str  # cards, inputs
    text: str
    muted: str
    border: str
    accent: str  # the hearth ember
    accent_text: str
    accent_soft: str  # selection, user bubble
    code_bg: str
    danger: str
    warning_bg: str
    warning_text: str
    pygments_style: str

    @property
    def dark(self) -> bool:
        return self.name == "dark"


LIGHT = Palette(
    name="light",
    window="#FFFFFF",
    sidebar="#F7F5F2",
    surface="#FFFFFF",
    text="#1F1D1B",
    muted="#6F6A64",
    border="#E5E0DA",
    accent="#C8552B",
    accent_text="#FFFFFF",
    accent_soft="#F6E9E1",
    code_bg="#F6F4F1",
    danger="#B3261E",
    warning_bg="#FFF4E0",
    warning_text="#7A4B00",
    pygments_style="friendly",
)

DARK = Palette(
    name="dark",
    window="#1B1A19",
    sidebar="#222120",
    surface="#2A2826",
    text="#ECE9E5",
    muted="#A39E97",
    border="#3A3734",
    accent="#EE8550",
    accent_text="#1B1A19",
    accent_soft="#3B2E27",
    code_bg="#141312",
    danger="#F2B8B5",
    warning_bg="#3D3018",
    warning_text="#F5D08A",
    pygments_style="github-dark",
)


def resolve(theme: str) -> Palette:
    """'system' follows the desktop's colour scheme (Qt 6.5+), 'light'/'dark' force one."""
    if theme == "dark":
        return DARK
    if theme == "light":
        return LIGHT
    hints = QGuiApplication.styleHints()
    return DARK if hints.colorScheme() == Qt.ColorScheme.Dark else LIGHT


def _qpalette(p: Palette) -> QPalette:
    pal = QPalette()
    role = QPalette.ColorRole
    for r, c in (
        (role.Window, p.window),
        (role.WindowText, p.text),
        (role.Base, p.surface),
        (role.AlternateBase, p.sidebar),
        (role.Text, p.text),
        (role.Button, p.surface),
        (role.ButtonText, p.text),
        (role.Highlight, p.accent),
        (role.HighlightedText, p.accent_text),
        (role.ToolTipBase, p.surface),
        (role.ToolTipText, p.text),
        (role.PlaceholderText, p.muted),
        (role.Link, p.accent),
        (role.Mid, p.border),
    ):
        pal.setColor(r, QColor(c))
    pal.setColor(QPalette.ColorGroup.Disabled, role.Text, QColor(p.muted))
    pal.setColor(QPalette.ColorGroup.Disabled, role.ButtonText, QColor(p.muted))
    return pal


def stylesheet(p: Palette) -> str:
    # Object names and dynamic properties ("role", "kind") select the styled widgets.
    return f"""
QWidget {{ color: {p.text}; }}
QMainWindow, #ChatPage, #ModelsPage, #SettingsPage, #Transcript, #TranscriptBody {{
    background: {p.window};
}}
#Sidebar {{ background: {p.sidebar}; border-right: 1px solid {p.border}; }}
#Brand {{ font-size: 17px; font-weight: 600; padding: 2px 4px; }}
#BrandMark {{ color: {p.accent}; font-size: 18px; }}
#PageTitle {{ font-size: 20px; font-weight: 600; qproperty-indent: 0; }}
#SectionTitle {{ font-size: 14px; font-weight: 600; qproperty-indent: 0; }}
#Muted, QLabel[kind="muted"] {{ color: {p.muted}; }}
#ChatHeader {{ border-bottom: 1px solid {p.border}; background: {p.window}; }}
#ChatTitle {{ font-size: 15px; font-weight: 600; }}
QListView#ChatList {{ background: transparent; border: none; outline: none; }}
QLineEdit, QPlainTextEdit, QTextEdit {{
    background: {p.surface}; border: 1px solid {p.border}; border-radius: 8px;
    padding: 5px 8px; selection-background-color: {p.accent};
    selection-color: {p.accent_text};
}}
QLineEdit:focus, QPlainTextEdit:focus {{ border: 1px solid {p.accent}; }}
QSpinBox, QDoubleSpinBox, QComboBox {{ min-height: 26px; }}
QPushButton {{ background: {p.surface}; border: 1px solid {p.border}; border-radius: 8px;
    padding: 6px 14px; }}
QPushButton:hover {{ border-color: {p.muted}; }}
QPushButton:focus {{ border: 1px solid {p.accent}; }}
QPushButton:disabled {{ color: {p.muted}; }}
QPushButton[kind="primary"] {{ background: {p.accent}; color: {p.accent_text};
    border: 1px solid {p.accent}; font-weight: 600; }}
QPushButton[kind="danger"] {{ color: {p.danger}; }}
QPushButton[kind="nav"] {{ background: transparent; border: none; text-align: left;
    padding: 7px 10px; border-radius: 8px; }}
QPushButton[kind="nav"]:hover {{ background: {p.accent_soft}; }}
QPushButton[kind="nav"]:checked {{ background: {p.accent_soft}; font-weight: 600; }}
QPushButton[kind="nav"]:focus {{ border: 1px solid {p.accent}; }}
QToolButton {{ background: transparent; border: 1px solid transparent; border-radius: 6px;
    padding: 3px 7px; color: {p.muted}; }}
QToolButton:hover {{ background: {p.accent_soft}; color: {p.text}; }}
QToolButton:focus {{ border: 1px solid {p.accent}; color: {p.text}; }}
QToolButton:checked {{ color: {p.accent}; }}
QToolButton:disabled {{ color: {p.border}; }}
#Composer {{ background: {p.surface}; border: 1px solid {p.border}; border-radius: 14px; }}
#Composer QPlainTextEdit {{ border: none; background: transparent; padding: 4px 2px; }}
#SendButton {{ background: {p.accent}; color: {p.accent_text}; border: none;
    border-radius: 16px; font-weight: 600; padding: 6px 16px; }}
#SendButton:disabled {{ background: {p.border}; color: {p.muted}; }}
#SendButton[stop="true"] {{ background: {p.text}; color: {p.window}; }}
#UserBubble {{ background: {p.accent_soft}; border-radius: 14px; }}
#ThinkingBox {{ border-left: 3px solid {p.border}; }}
#ErrorCard {{ background: {p.warning_bg}; border-radius: 8px; }}
#ErrorCard QLabel {{ color: {p.warning_text}; }}
#SummaryNotice {{ background: {p.surface}; border: 1px dashed {p.border}; border-radius: 8px; }}
#CompareColumn {{ border: 1px solid {p.border}; border-radius: 8px; }}
#CompareColumn[chosen="true"] {{ border: 1px solid {p.accent}; }}
#ApprovalCard {{ background: {p.accent_soft}; border: 1px solid {p.border}; border-radius: 8px; }}
#Stats {{ color: {p.muted}; font-size: 11px; }}
#RoleLabel {{ font-weight: 600; }}
#Banner {{ background: {p.accent_soft}; border-bottom: 1px solid {p.border}; }}
#Toast {{ background: {p.text}; border-radius: 10px; }}
#Toast QLabel {{ color: {p.window}; }}
#Toast[level="error"] {{ background: {p.danger}; }}
#Toast[level="error"] QLabel {{ color: {p.window}; }}
#DropOverlay {{ background: rgba(0, 0, 0, 90); }}
#DropCard {{ background: {p.surface}; border: 2px dashed {p.accent}; border-radius: 16px; }}
#Warning {{ background: {p.warning_bg}; color: {p.warning_text}; border-radius: 8px;
    padding: 8px 10px; qproperty-indent: 0; }}
#Badge {{ background: {p.sidebar}; color: {p.muted}; border: 1px solid {p.border};
    border-radius: 7px; padding: 1px 8px; font-size: 11px; font-weight: 600; }}
#Badge[capability="vision"] {{ background: {p.accent_soft}; color: {p.accent};
    border-color: {p.accent}; }}
#Card {{ background: {p.surface}; border: 1px solid {p.border}; border-radius: 12px; }}
QTableView {{ background: {p.surface}; border: 1px solid {p.border}; border-radius: 10px;
    gridline-color: transparent; selection-background-color: {p.accent_soft};
    selection-color: {p.text}; outline: none; }}
QTableView::item {{ padding: 0px 8px; }}
QHeaderView::section {{ background: {p.sidebar}; border: none;
    border-bottom: 1px solid {p.border}; padding: 6px 8px; color: {p.muted}; font-weight: 600; }}
QProgressBar {{ background: {p.border}; border: none; border-radius: 3px; max-height: 6px;
    text-align: center; }}
QProgressBar::chunk {{ background: {p.accent}; border-radius: 3px; }}
QScrollArea {{ border: none; background: transparent; }}
QScrollBar:vertical {{ background: transparent; width: 10px; margin: 2px; }}
QScrollBar::handle:vertical {{ background: {p.border}; border-radius: 4px; min-height: 30px; }}
QScrollBar::add-line:vertical, QScrollBar::sub-line:vertical {{ height: 0; }}
QCheckBox::indicator {{ width: 16px; height: 16px; }}
QCheckBox[kind="switch"]::indicator {{ width: 34px; height: 18px; border-radius: 9px;
    background: {p.border}; image: none; }}
QCheckBox[kind="switch"]::indicator:checked {{ background: {p.accent}; }}
QToolTip {{ background: {p.surface}; color: {p.text}; border: 1px solid {p.border}; }}
QDialog {{ background: {p.window}; }}
"""


def apply_theme(app: QApplication, theme: str) -> Palette:
    palette = resolve(theme)
    app.setStyle("Fusion")
    app.setPalette(_qpalette(palette))
    app.setStyleSheet(stylesheet(palette))
    font = QFont(app.font())
    if font.pointSizeF() < 10:
        font.setPointSizeF(10)
    app.setFont(font)
    return palette
