"""The Jobs page's filter bar: state chips (none checked shows every state), computer and
engine combos, a search field; and the filter saved between starts."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSettings, QSize, Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLineEdit, QPushButton, QWidget

from app.models.job_text import ALL_STATES, STATE_LABELS, engine_label
from app.models.jobs import JobFilter, JobsModel, state_dot
from app.window.theme import is_dark
from app.window.widgets import SPACE_SECTION, SPACE_TIGHT
from backend.protocol.types.jobs import JobState

SETTINGS_PREFIX = "jobs/"
CHIP_STYLE = """
QPushButton {
    padding: 3px 10px; border: 1px solid palette(mid); border-radius: 11px;
    background: palette(base); color: palette(text);
}
QPushButton:hover { border-color: palette(highlight); }
QPushButton:checked {
    background: %s; color: palette(text);
    border: 2px solid palette(highlight); padding: 2px 9px;
}
"""
# A checked chip is tinted, not filled with the highlight colour: each state's dot (the
# Running one is blue) stays visible on it.
CHECKED_TINT = 0.16  # how much of the highlight colour shows through a checked chip
BASE, HIGHLIGHT = QPalette.ColorRole.Base, QPalette.ColorRole.Highlight


def _channels(colour: QColor) -> tuple[float, float, float]:
    return colour.redF(), colour.greenF(), colour.blueF()


def chip_style(palette: QPalette) -> str:
    """The chips' style sheet for ``palette``: checked ones tinted with its highlight."""
    base, highlight = (_channels(palette.color(role)) for role in (BASE, HIGHLIGHT))
    share = CHECKED_TINT
    channels = [share * h + (1 - share) * b for h, b in zip(highlight, base, strict=True)]
    return CHIP_STYLE % QColor.fromRgbF(*channels).name()


def load_filter(settings: QSettings) -> JobFilter:
    """The filter saved by ``save_filter`` (unknown states are dropped)."""

    def text(name: str) -> str:
        value = settings.value(SETTINGS_PREFIX + name, "")
        return value if isinstance(value, str) else ""

    states = frozenset(state for state in ALL_STATES if state in text("states").split(","))
    return JobFilter(
        states=states, node=text("node") or None, engine=text("engine") or None, text=text("search")
    )


def save_filter(settings: QSettings, job_filter: JobFilter) -> None:
    """Remember the filter for the next start."""
    values = {
        "states": ",".join(state for state in ALL_STATES if state in job_filter.states),
        "node": job_filter.node or "",
        "engine": job_filter.engine or "",
        "search": job_filter.text,
    }
    for name, value in values.items():
        settings.setValue(SETTINGS_PREFIX + name, value)


class JobsFilterBar(QWidget):
    """State toggles (none checked shows every state), node and engine combos, a search field."""

    def __init__(self, model: JobsModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = model
        self._style = ""
        self.state_buttons: dict[JobState, QPushButton] = {}
        self.node_combo = QComboBox()
        self.node_combo.setToolTip("Jobs asked on, sent to or run on one computer")
        self.engine_combo = QComboBox()
        for combo, characters in ((self.node_combo, 16), (self.engine_combo, 9)):
            # A steady width: long node names elide instead of pushing the search field away.
            combo.setSizeAdjustPolicy(
                QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
            )
            combo.setMinimumContentsLength(characters)
        self.search_field = QLineEdit()
        self.search_field.setPlaceholderText("Search model or error")
        self.search_field.setClearButtonEnabled(True)
        self.search_field.setMinimumWidth(160)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(SPACE_TIGHT)
        for state in ALL_STATES:
            button = QPushButton(STATE_LABELS[state])
            button.setIconSize(QSize(12, 12))
            button.setCheckable(True)
            button.setCursor(Qt.CursorShape.PointingHandCursor)
            button.setToolTip(f"Show {STATE_LABELS[state].lower()} jobs (none selected: all)")
            self.state_buttons[state] = button
            layout.addWidget(button)
        layout.addSpacing(SPACE_SECTION - 2 * SPACE_TIGHT)  # a section gap in all
        layout.addWidget(self.node_combo)
        layout.addWidget(self.engine_combo)
        layout.addStretch(1)
        # The search field sits in the page's header row (more room there); it is still ours.
        # Chips: Fusion's checked buttons differ from unchecked ones by a shade only.
        self._follow_palette()

    def changeEvent(self, event: QEvent) -> None:
        """Draw the chips' dots and tint again when the palette turns light or dark."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._follow_palette()

    def _follow_palette(self) -> None:
        palette = self.palette()
        style = chip_style(palette)
        # Setting a style sheet changes the palette, which calls this again at once.
        if style != self._style:
            self._style = style
            self.setStyleSheet(style)
        for state, button in self.state_buttons.items():
            button.setIcon(state_dot(state, is_dark(palette)))

    def read(self) -> JobFilter:
        """The filter the controls show."""
        checked = (state for state, button in self.state_buttons.items() if button.isChecked())
        return JobFilter(
            states=frozenset(checked),
            node=self.node_combo.currentData(),
            engine=self.engine_combo.currentData(),
            text=self.search_field.text(),
        )

    def show_filter(self, job_filter: JobFilter) -> None:
        """Set the controls to ``job_filter`` without emitting their change signals."""
        for state, button in self.state_buttons.items():
            button.blockSignals(True)
            button.setChecked(state in job_filter.states)
            button.blockSignals(False)
        self.refresh_choices(job_filter)
        self.search_field.blockSignals(True)
        self.search_field.setText(job_filter.text)
        self.search_field.blockSignals(False)

    def refresh_choices(self, job_filter: JobFilter) -> None:
        """Offer this computer, each member, and the other nodes and the engines among the jobs
        (and the ones selected, even without)."""
        model = self._model
        own = [model.self_id] if model.self_id is not None else []
        members = [node for node in model.members() if node not in own]
        known = {*own, *members}
        others = set(model.nodes()) | _present(job_filter.node)
        rest = sorted(others - known, key=self._node_label)
        ordered = [*own, *members, *rest]
        _fill(self.node_combo, "All computers", [(self._node_label(n), n) for n in ordered])
        _select(self.node_combo, job_filter.node)
        engines = sorted(set(self._model.engines()) | _present(job_filter.engine))
        _fill(self.engine_combo, "All engines", [(engine_label(e), e) for e in engines])
        _select(self.engine_combo, job_filter.engine)

    def _node_label(self, node_id: str) -> str:
        label = self._model.node_label(node_id)
        return f"{label} (this computer)" if self._model.is_self(node_id) else label


def _present(value: str | None) -> set[str]:
    return set() if value is None else {value}


def _fill(combo: QComboBox, everything: str, items: list[tuple[str, str]]) -> None:
    combo.blockSignals(True)
    combo.clear()
    combo.addItem(everything, None)
    for label, value in items:
        combo.addItem(label, value)
    combo.blockSignals(False)


def _select(combo: QComboBox, value: str | None) -> None:
    combo.blockSignals(True)
    combo.setCurrentIndex(max(0, combo.findData(value)) if value is not None else 0)
    combo.blockSignals(False)
