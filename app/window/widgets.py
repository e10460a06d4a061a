"""Small shared widget helpers: the spacing and type scales every page uses, state-tinted
text that follows light and dark, the fixed-width font, copying with feedback, and a table as
tall as its rows."""

from __future__ import annotations

from PySide6.QtCore import QAbstractItemModel, QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QFont, QFontDatabase, QGuiApplication, QPalette, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.window.look import State, state_colour
from app.window.theme import is_dark

COPIED_MS = 1500

# The spacing scale: pages, cards and rows take their gaps from here, nothing in between.
SPACE_TIGHT = 4  # a label and its figure, lines of one item
SPACE = 8  # widgets in a row, items in a list
SPACE_SECTION = 12  # sections of a page, cards in a grid
PAGE_MARGINS = (24, 20, 24, 24)  # left, top, right, bottom of every page
CARD_MARGINS = (14, 12, 14, 12)  # inside a card's frame
DIALOG_MARGINS = (24, 20, 24, 16)  # a dialog's edges: a page's, a little less under its buttons

# The type scale, as factors of the system font.
PAGE_TITLE_SCALE = 1.5
HEADLINE_SCALE = 1.25
SECTION_TITLE_SCALE = 1.1
CAPTION_SCALE = 0.92
STATE_PROPERTY = "pairState"  # the State a tinted widget shows, as a dynamic property


def _scaled(label: QLabel, factor: float, *, bold: bool) -> QLabel:
    font = label.font()
    font.setPointSizeF(font.pointSizeF() * factor)
    font.setBold(bold)
    label.setFont(font)
    return label


def page_title(text: str, parent: QWidget | None = None) -> QLabel:
    """A page heading: the system font, larger and bold."""
    return _scaled(QLabel(text, parent), PAGE_TITLE_SCALE, bold=True)


def headline(text: str = "", parent: QWidget | None = None) -> QLabel:
    """An empty state's first line: bigger than body text, bold, wrapped."""
    label = _scaled(QLabel(text, parent), HEADLINE_SCALE, bold=True)
    label.setWordWrap(True)
    return label


def section_title(text: str = "", parent: QWidget | None = None) -> QLabel:
    """A heading inside a page (a group of cards, a list): a little larger, bold."""
    return _scaled(QLabel(text, parent), SECTION_TITLE_SCALE, bold=True)


def muted_label(text: str = "", parent: QWidget | None = None) -> QLabel:
    """A word-wrapped label in the palette's placeholder (secondary) text colour."""
    label = QLabel(text, parent)
    label.setWordWrap(True)
    label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
    return label


def caption(text: str = "", parent: QWidget | None = None) -> QLabel:
    """Secondary small print under a figure or a row: muted and a little smaller."""
    return _scaled(muted_label(text, parent), CAPTION_SCALE, bold=False)


def page_layout(layout: QBoxLayout) -> QBoxLayout:
    """``layout`` with the page margins and the section spacing."""
    layout.setContentsMargins(*PAGE_MARGINS)
    layout.setSpacing(SPACE_SECTION)
    return layout


def left_aligned_headers(view: QTableView) -> QTableView:
    """Column titles start where their cells' text starts."""
    alignment = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
    view.horizontalHeader().setDefaultAlignment(alignment)
    return view


def read_only_table(model: QAbstractItemModel, row_height: int, stretch_column: int) -> QTableView:
    """A table nobody edits, selected by whole rows, one line a row, ``stretch_column`` widest."""
    table = QTableView()
    table.setModel(model)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setAlternatingRowColors(True)
    table.setWordWrap(False)
    table.verticalHeader().hide()
    table.verticalHeader().setDefaultSectionSize(row_height)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(stretch_column, QHeaderView.ResizeMode.Stretch)
    return left_aligned_headers(table)


# Both states share padding and border, so choosing a segment never moves its neighbour.
SEGMENT_STYLE = """
QPushButton { padding: 4px 12px; border: 1px solid palette(mid); background: palette(button);
              color: palette(button-text); border-radius: 0px; }
QPushButton:checked { background: palette(highlight); color: palette(highlighted-text);
                      border-color: palette(highlight); }
QPushButton:hover:!checked { background: palette(midlight); }
"""
_SEGMENT_ENDS = (
    "border-top-left-radius: 4px; border-bottom-left-radius: 4px;",
    "border-top-right-radius: 4px; border-bottom-right-radius: 4px;",
)


def segmented(*buttons: QPushButton) -> None:
    """Style checkable ``buttons`` as one segmented control: the chosen one in the highlight
    colour, light or dark, with rounded outer ends."""
    for position, button in enumerate(buttons):
        ends = ""
        if position == 0:
            ends += _SEGMENT_ENDS[0]
        if position == len(buttons) - 1:
            ends += _SEGMENT_ENDS[1]
        button.setStyleSheet(SEGMENT_STYLE + (f"QPushButton {{ {ends} }}" if ends else ""))


class EmptyState(QWidget):
    """What a page shows with nothing to list: a centred headline, a short sentence and,
    where something fills the page, the button that does it."""

    action_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.headline = headline()
        self.headline.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.message = muted_label()
        self.message.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.action_button = QPushButton()
        self.action_button.hide()
        self.action_button.clicked.connect(self.action_clicked)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(PAGE_MARGINS[0], 0, PAGE_MARGINS[2], 0)
        layout.setSpacing(SPACE)
        layout.addStretch(1)
        layout.addWidget(self.headline)
        layout.addWidget(self.message)
        layout.addSpacing(SPACE_TIGHT)
        layout.addWidget(self.action_button, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addStretch(2)

    def show_text(self, title: str, message: str, action: str | None = None) -> None:
        """Say ``title``, then ``message``; ``action`` names the button (None: no button)."""
        self.headline.setText(title)
        self.headline.setVisible(bool(title))
        self.message.setText(message)
        self.action_button.setText(action or "")
        self.action_button.setVisible(action is not None)


class _Tint(QObject):
    """Re-colours its widget's text when the palette turns light or dark."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Tint again after a palette change (the shade depends on light or dark)."""
        changes = (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange)
        if event.type() in changes and isinstance(watched, QWidget):
            _apply_tint(watched)
        return False


def _apply_tint(widget: QWidget) -> None:
    state = widget.property(STATE_PROPERTY)
    palette = widget.palette()
    if not isinstance(state, str):
        if palette.isBrushSet(QPalette.ColorGroup.Active, QPalette.ColorRole.WindowText):
            widget.setPalette(QPalette())  # the inherited colours again
        return
    colour = state_colour(State(state), is_dark(palette))
    if palette.color(QPalette.ColorRole.WindowText) == colour:
        return  # also ends the palette change the line below sends
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text):
        palette.setColor(role, colour)
    widget.setPalette(palette)


def tint(widget: QWidget, state: State | None) -> None:
    """Show ``widget``'s text in ``state``'s colour (None: the usual text colour), following
    the palette between light and dark."""
    if widget.findChild(_Tint, options=Qt.FindChildOption.FindDirectChildrenOnly) is None:
        widget.installEventFilter(_Tint(widget))
    widget.setProperty(STATE_PROPERTY, None if state is None else state.value)
    _apply_tint(widget)


def tinted_state(widget: QWidget) -> State | None:
    """The state ``widget`` is tinted with, if any."""
    value = widget.property(STATE_PROPERTY)
    return State(value) if isinstance(value, str) else None


def fixed_font() -> QFont:
    """The system's fixed-width font, for fingerprints and secrets."""
    return QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)


def copy_to_clipboard(text: str, button: QPushButton) -> None:
    """Put ``text`` on the clipboard; the button says "Copied" for a moment."""
    QGuiApplication.clipboard().setText(text)
    label = button.text()
    button.setText("Copied")
    QTimer.singleShot(COPIED_MS, button, lambda: button.setText(label))


class FittedTable(QTableView):
    """A read-only, single-row-selecting table as tall as its rows (within bounds), so the
    page scrolls rather than the table; column ``stretch`` takes the spare width."""

    def __init__(
        self, model: QAbstractItemModel, stretch: int, minimum_rows: int, maximum_rows: int
    ) -> None:
        super().__init__()
        self._stretch = stretch
        self._rows = (minimum_rows, maximum_rows)
        self.setModel(model)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setAlternatingRowColors(True)
        self.setShowGrid(False)
        self.setWordWrap(False)
        self.verticalHeader().hide()
        header = self.horizontalHeader()
        header.setHighlightSections(False)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
        header.setStretchLastSection(False)

    def fit(self) -> None:
        """Size the columns to their contents and the height to the rows."""
        header = self.horizontalHeader()
        # The header's own resize-to-contents misses rows that arrive while it is hidden.
        for column in range(header.count()):
            if column != self._stretch:
                self.resizeColumnToContents(column)
        low, high = self._rows
        rows = min(max(self.model().rowCount(), low), high)
        frame = 2 * self.frameWidth()
        height = header.sizeHint().height() + rows * self.verticalHeader().defaultSectionSize()
        if header.length() > self.width() - frame:  # too narrow: a scroll bar takes room
            height += self.horizontalScrollBar().sizeHint().height()
        self.setFixedHeight(height + frame)

    def resizeEvent(self, event: QResizeEvent) -> None:
        """Fit again: a narrower table may need its scroll bar."""
        super().resizeEvent(event)
        self.fit()
