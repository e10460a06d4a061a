"""One node's card on the Overview page: who it is, whether it answers, its load and engines."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.models.nodes import EngineLine, GpuLine, NodeCard, Sample
from app.window.gpu_lines import (
    NO_VALUE,
    busiest_percent,
    format_percent,
    format_used,
    gpu_figures,
    memory_size,
    summed_vram,
    vram_fraction,
)
from app.window.look import SERIES_SHADES, Series, State, state_colour
from app.window.sparkline import Sparkline, UsageBar
from app.window.theme import is_dark
from app.window.widgets import CARD_MARGINS, SPACE, SPACE_TIGHT, caption, muted_label

ENGINE_STATES = {
    "running": State.OK,
    "starting": State.PENDING,
    "stopping": State.PENDING,
    "error": State.ERROR,
}  # any other state (stopped, offline, not installed) is idle
MIN_CARD_WIDTH = 320
W = TypeVar("W", bound=QWidget)
L = TypeVar("L", bound=QLabel)

# Selectors by object name, so the card's frame style does not leak into its children.
CARD_STYLE = """
#nodeCard { background-color: palette(base); border: 1px solid palette(mid);
            border-radius: 10px; }
#metricTile { background-color: palette(alternate-base); border-radius: 6px; }
#badge { border: 1px solid palette(mid); border-radius: 8px; padding: 0px 6px; }
"""


def format_seen(at: float, now: float | None = None) -> str:
    """``14:32`` today, ``3 Mar 14:32`` before."""
    moment = time.localtime(at)
    today = time.localtime(now if now is not None else time.time())
    same_day = moment.tm_yday == today.tm_yday and moment.tm_year == today.tm_year
    return time.strftime("%H:%M" if same_day else "%d %b %H:%M", moment)


def dot(colour: QColor) -> str:
    """A coloured bullet as rich text."""
    return f'<span style="color: {colour.name()};">●</span>'


def state_dot(state: State, widget: QWidget) -> str:
    """A bullet in ``state``'s colour for ``widget``'s palette (light or dark)."""
    return dot(state_colour(state, is_dark(widget.palette())))


def muted(label: L) -> L:
    """``label`` in the muted text colour, like ``muted_label``'s."""
    label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
    return label


def scaled(label: L, factor: float, *, bold: bool = False) -> L:
    """``label`` with its font scaled by ``factor`` (and bold)."""
    font = label.font()
    font.setPointSizeF(font.pointSizeF() * factor)
    font.setBold(bold)
    label.setFont(font)
    return label


class ElidedLabel(QLabel):
    """A one-line label that may shrink below its text, ending it in "…" (full text as tooltip)."""

    def minimumSizeHint(self) -> QSize:
        """As short as the font allows, and no width at all."""
        return QSize(0, super().minimumSizeHint().height())

    def setText(self, text: str) -> None:
        """Show ``text`` (elided when it does not fit)."""
        super().setText(text)
        self.setToolTip(text)

    def paintEvent(self, event: QPaintEvent) -> None:
        """Draw the text elided to the width the layout gave."""
        painter = QPainter(self)
        try:
            rect = self.contentsRect()
            text = self.fontMetrics().elidedText(
                self.text(), Qt.TextElideMode.ElideRight, rect.width()
            )
            self.style().drawItemText(
                painter,
                rect,
                int(self.alignment()),
                self.palette(),
                self.isEnabled(),
                text,
                self.foregroundRole(),
            )
        finally:
            painter.end()


class MetricTile(QFrame):
    """A figure (CPU, memory or GPU): its name, the current value, a sparkline and a caption."""

    def __init__(self, title: str, series: Series, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("metricTile")
        self.title = caption(title)
        self.value = scaled(QLabel(NO_VALUE), 1.35, bold=True)
        self.sparkline = Sparkline(SERIES_SHADES[series])
        self.caption = caption()  # wraps in narrow tiles
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, SPACE, 10, SPACE)
        layout.setSpacing(2)
        layout.addWidget(self.title)
        layout.addWidget(self.value)
        layout.addWidget(self.sparkline)
        layout.addWidget(self.caption)
        layout.addStretch(1)  # a taller neighbour leaves space below, not between the lines
        self.setMinimumWidth(0)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def show_figure(
        self,
        value: str,
        caption: str,
        points: Sequence[tuple[float, float | None]],
        *,
        muted: bool,
    ) -> None:
        """Update the value, caption and chart in place."""
        self.value.setText(value)
        self.caption.setText(caption or " ")
        self.sparkline.set_points(points, muted=muted)


class GpuRow(QWidget):
    """One GPU: name, utilisation, VRAM used/total and a VRAM bar."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name = ElidedLabel()
        self.figures = muted_label()
        self.figures.setWordWrap(False)
        self.figures.setAlignment(Qt.AlignmentFlag.AlignRight)
        self.bar = UsageBar(SERIES_SHADES[Series.VRAM])  # VRAM in use, as in the VRAM tile
        top = QHBoxLayout()
        top.setSpacing(SPACE)
        top.addWidget(self.name, 1)
        top.addWidget(self.figures)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(3)
        layout.addLayout(top)
        layout.addWidget(self.bar)

    def show_gpu(self, gpu: GpuLine) -> None:
        """Update the row in place; figures that were not read are left out."""
        self.name.setText(gpu.name)
        self.figures.setText(gpu_figures(gpu))
        fraction = vram_fraction(gpu.vram_used_bytes, gpu.vram_total_bytes)
        self.bar.set_fraction(fraction)
        self.bar.setVisible(fraction is not None)


class EngineRow(QWidget):
    """One engine: a state dot, its name, its state and the models it has loaded."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name = QLabel()
        self.name.setTextFormat(Qt.TextFormat.RichText)
        self.state = muted_label()
        self.state.setWordWrap(False)
        self.models = caption()
        self._engine: EngineLine | None = None
        top = QHBoxLayout()
        top.setSpacing(SPACE)
        top.addWidget(self.name, 1)
        top.addWidget(self.state)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(1)
        layout.addLayout(top)
        layout.addWidget(self.models)

    def show_engine(self, engine: EngineLine) -> None:
        """Update the row in place."""
        self._engine = engine
        colour = state_dot(ENGINE_STATES.get(engine.state, State.IDLE), self)
        self.name.setText(f"{colour}&nbsp;&nbsp;{engine.name}")
        self.state.setText(engine.state.replace("-", " "))
        if engine.loaded:
            self.models.setText("Loaded: " + ", ".join(engine.loaded))
        elif engine.state == "running":
            self.models.setText("No model loaded")
        self.models.setVisible(bool(engine.loaded) or engine.state == "running")

    def changeEvent(self, event: QEvent) -> None:
        """Pick the dot's shade again when the palette turns light or dark."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self._engine is not None:
            self.show_engine(self._engine)


def _resize_rows(rows: list[W], count: int, layout: QVBoxLayout, make: Callable[[], W]) -> None:
    """Add or drop rows at the end so there are ``count``; the others stay as they are."""
    while len(rows) > count:
        row = rows.pop()
        layout.removeWidget(row)
        row.deleteLater()
    while len(rows) < count:
        row = make()
        rows.append(row)
        layout.addWidget(row)


def subtitle(card: NodeCard) -> str:
    """The line under the name, alike for every PAIR computer: ``Linux · 32 CPU threads ·
    64 GB`` from what is known; an engine-only address says so and where it answers."""
    if card.kind == "engine":
        parts = ["Engine without PAIR", card.endpoint]
    else:
        threads = f"{card.cpu_threads} CPU threads" if card.cpu_threads else None
        parts = [card.system, threads, memory_size(card.memory_total_bytes)]
    return " · ".join(part for part in parts if part)


def service_line(card: NodeCard, now: float | None = None) -> str:
    """The second line: ``PAIR 0.4.0 · 192.168.1.9:14320`` and, when offline, when last seen."""
    parts = [] if card.kind == "engine" else [f"PAIR {card.version}" if card.version else None]
    parts.append(card.endpoint if card.kind == "pair" else None)
    if not card.reachable and card.last_seen is not None:
        parts.append(f"last seen {format_seen(card.last_seen, now)}")
    return " · ".join(part for part in parts if part)


def hardware_tip(card: NodeCard) -> str:
    """The subtitle's tooltip: the full OS and CPU names where this computer read them."""
    return "\n".join(part for part in (card.os, card.cpu_name) if part)


class NodeCardWidget(QFrame):
    """One node's card; ``show_node`` updates it in place (rows change only when their count
    does). A node running only an engine gets the simpler card: no figures, just the engine."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("nodeCard")
        self.setStyleSheet(CARD_STYLE)
        self.setMinimumWidth(MIN_CARD_WIDTH)
        self.node_id = ""
        self.name = scaled(ElidedLabel(), 1.2, bold=True)
        self.badge = scaled(muted_label(), 0.85)
        self._reachable: bool | None = None
        self.badge.setObjectName("badge")
        self.badge.setWordWrap(False)
        self.status = QLabel()
        self.subtitle = muted(ElidedLabel())
        self.service = scaled(muted(ElidedLabel()), 0.92)
        self.tiles = {
            "cpu": MetricTile("CPU", Series.CPU),
            "memory": MetricTile("Memory", Series.MEMORY),
            "gpu": MetricTile("GPU", Series.GPU),
            "vram": MetricTile("VRAM", Series.VRAM),
        }
        self.gpu_rows: list[GpuRow] = []
        self.engine_rows: list[EngineRow] = []
        self.engines_note = muted_label()
        self._lay_out()

    def _lay_out(self) -> None:
        header = QHBoxLayout()
        header.setSpacing(SPACE)
        header.addWidget(self.name, 1)
        header.addWidget(self.badge)
        header.addWidget(self.status)
        self.metrics = QWidget()
        tiles = QGridLayout(self.metrics)
        tiles.setContentsMargins(0, SPACE_TIGHT, 0, 0)
        tiles.setSpacing(SPACE)
        for position, tile in enumerate(self.tiles.values()):
            tiles.addWidget(tile, *divmod(position, 2))  # CPU and memory, then GPU and VRAM
        tiles.setColumnStretch(0, 1)
        tiles.setColumnStretch(1, 1)
        self.gpu_section, self._gpu_layout = _section("GPUs")
        self.engine_section, self._engine_layout = _section("Engines")
        self._engine_layout.addWidget(self.engines_note)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(*CARD_MARGINS)
        layout.setSpacing(SPACE)
        layout.addLayout(header)
        header_lines = QVBoxLayout()
        header_lines.setSpacing(1)
        header_lines.addWidget(self.subtitle)
        header_lines.addWidget(self.service)
        layout.addLayout(header_lines)
        layout.addWidget(self.metrics)
        layout.addWidget(self.gpu_section)
        layout.addWidget(self.engine_section)
        layout.addStretch(1)

    def _show_status(self, reachable: bool) -> None:
        self._reachable = reachable
        state, word = (State.OK, "Online") if reachable else (State.IDLE, "Offline")
        self.status.setText(f"{state_dot(state, self)}&nbsp;{word}")

    def changeEvent(self, event: QEvent) -> None:
        """Pick the status dot's shade again when the palette turns light or dark."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self._reachable is not None:
            self._show_status(self._reachable)

    def show_node(self, card: NodeCard, history: Sequence[Sample]) -> None:
        """Show ``card`` and its chart ``history``."""
        self.node_id = card.node_id
        self.name.setText(card.name)
        badge = "This computer" if card.is_self else "Engine only" if card.kind == "engine" else ""
        self.badge.setText(badge)
        self.badge.setVisible(bool(badge))
        self._show_status(card.reachable)
        self.subtitle.setText(subtitle(card))
        self.subtitle.setToolTip(hardware_tip(card) or self.subtitle.text())
        self.subtitle.setVisible(bool(self.subtitle.text()))
        self.service.setText(service_line(card))
        self.service.setVisible(bool(self.service.text()))
        self.metrics.setVisible(card.kind == "pair")
        if card.kind == "pair":
            self._show_metrics(card, history)
        self._show_gpus(card)
        self._show_engines(card)

    def _show_metrics(self, card: NodeCard, history: Sequence[Sample]) -> None:
        live = card.reachable
        # Stalled sampling keeps the last figures (telemetry not valid): grey their charts.
        muted = not (live and card.telemetry_valid)

        def figure(value: float | None) -> str:
            return format_percent(value) if live else NO_VALUE

        memory = format_used(card.memory_used_bytes, card.memory_total_bytes) if live else ""
        memory_percent = None
        if card.memory_used_bytes is not None and card.memory_total_bytes:
            memory_percent = 100.0 * card.memory_used_bytes / card.memory_total_bytes
        self.tiles["cpu"].show_figure(
            figure(card.cpu_percent),
            "",
            [(s.at, s.cpu_percent) for s in history],
            muted=muted,
        )
        self.tiles["memory"].show_figure(
            figure(memory_percent), memory, [(s.at, s.memory_percent) for s in history], muted=muted
        )
        self._show_gpu_tiles(card, history, muted=muted)

    def _show_gpu_tiles(self, card: NodeCard, history: Sequence[Sample], *, muted: bool) -> None:
        """A tile per GPU figure that was read: none for a computer without a GPU."""
        live, gpus = card.reachable, card.gpus
        busiest = busiest_percent(gpus)
        used, total = summed_vram(gpus)
        vram = vram_fraction(used, total)
        self.tiles["gpu"].setVisible(busiest is not None)
        self.tiles["gpu"].show_figure(
            format_percent(busiest) if live else NO_VALUE,
            _gpu_caption(gpus),
            [(s.at, s.gpu_percent) for s in history],
            muted=muted,
        )
        self.tiles["vram"].setVisible(total is not None)
        self.tiles["vram"].show_figure(
            format_percent(None if vram is None else 100.0 * vram) if live else NO_VALUE,
            format_used(used, total) if live else "",
            [(s.at, s.vram_percent) for s in history],
            muted=muted,
        )

    def _show_gpus(self, card: NodeCard) -> None:
        # Figures of a computer that does not answer are stale: its tiles keep the charts.
        shown = card.gpus if card.reachable else ()
        _resize_rows(self.gpu_rows, len(shown), self._gpu_layout, GpuRow)
        for row, gpu in zip(self.gpu_rows, shown, strict=True):
            row.show_gpu(gpu)
        self.gpu_section.setVisible(bool(shown))

    def _show_engines(self, card: NodeCard) -> None:
        engines = card.engines if card.reachable else tuple(_offline(e) for e in card.engines)
        _resize_rows(self.engine_rows, len(engines), self._engine_layout, EngineRow)
        for row, engine in zip(self.engine_rows, engines, strict=True):
            row.show_engine(engine)
        note = "No engines installed" if card.is_self else "No engines running"
        self.engines_note.setText(note)
        self.engines_note.setVisible(not engines)


def _offline(engine: EngineLine) -> EngineLine:
    return EngineLine(engine.engine, engine.name, "offline", engine.loaded)


def _gpu_caption(gpus: Sequence[GpuLine]) -> str:
    """The GPU tile's caption: which GPU, or that the figure is the busiest of several."""
    return gpus[0].name if len(gpus) == 1 else f"Busiest of {len(gpus)} GPUs"


def _section(title: str) -> tuple[QWidget, QVBoxLayout]:
    """A titled block whose rows go into the returned layout."""
    section = QWidget()
    layout = QVBoxLayout(section)
    layout.setContentsMargins(0, 6, 0, 0)
    layout.setSpacing(6)
    heading = scaled(QLabel(title), 0.9, bold=True)
    layout.addWidget(heading)
    return section, layout
