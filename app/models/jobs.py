"""Jobs as the Jobs page shows them: a keyed table kept newest first, node names resolved for
display, a live Duration column, and a filter proxy (state, node, engine, free text)."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import msgspec
from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPainter, QPalette, QPixmap

from app.models.job_text import TERMINAL, TITLES, JobColumn, cell_text, cell_tooltip, last_text
from app.models.keyed_table import ROW_ROLE
from app.window.look import State, app_is_dark, state_colour
from backend.protocol.types.jobs import JobRecord, JobState

TICK_MS = 1000
_NO_PARENT = QModelIndex()
_TEXT_ROLES = [Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole]
_ROLES = frozenset(
    {
        Qt.ItemDataRole.DisplayRole,
        Qt.ItemDataRole.ToolTipRole,
        Qt.ItemDataRole.ForegroundRole,
        Qt.ItemDataRole.DecorationRole,
        Qt.ItemDataRole.TextAlignmentRole,
        ROW_ROLE,
    }
)
_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
# A tick refreshes unfinished rows closer than this as one range (fewer signals, a few extra
# rows repainted).
TICK_GAP = 16
ModelIndex = QModelIndex | QPersistentModelIndex
SortKey = tuple[float, str]

# A running job is busy in a neutral way (blue), not yet the green of one that completed.
JOB_STATES: dict[JobState, State] = {
    "in_flight": State.PENDING,
    "running": State.INFO,
    "completed": State.OK,
    "failed": State.ERROR,
    "cancelled": State.IDLE,
}


class JobsModel(QAbstractTableModel):
    """Jobs keyed by ``key``, newest first (``created_at``, then ``key``).

    Rows are stored oldest first and shown reversed, so a new job (the usual case) is an append
    and every lookup by key is a binary search: no reindexing on insert or remove. ``upsert`` and
    ``remove`` emit row-level signals; only ``reset`` resets. Owns a 1 s timer, running while a
    job is unfinished, that refreshes only the Duration column of unfinished rows.
    """

    choices_changed = Signal()  # the engines or nodes among the jobs changed
    names_changed = Signal()  # a node's display name changed

    def __init__(
        self,
        parent: QObject | None = None,
        *,
        now: Callable[[], float] = time.time,
        tick_ms: int = TICK_MS,
    ) -> None:
        super().__init__(parent)
        self._now = now
        self._order: list[SortKey] = []  # oldest first, parallel to _rows
        self._rows: list[JobRecord] = []
        self._sort_keys: dict[str, SortKey] = {}
        self._live: set[str] = set()  # unfinished jobs
        self._states: Counter[str] = Counter()
        self._engines: Counter[str] = Counter()
        self._nodes: Counter[str] = Counter()
        self._names: dict[str, str] = {}
        self._self_id: str | None = None
        self._members: dict[str, str] = {}  # the other members of this node's cluster
        self._dots: dict[tuple[JobState, bool], QIcon] = {}  # drawn on first use, light or dark
        self._timer = QTimer(self)
        self._timer.setInterval(tick_ms)
        self._timer.timeout.connect(self.tick)

    # Qt model ---------------------------------------------------------------------------------

    def rowCount(self, parent: ModelIndex = _NO_PARENT) -> int:
        """Number of jobs (a flat table)."""
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: ModelIndex = _NO_PARENT) -> int:
        """Number of columns."""
        return 0 if parent.isValid() else len(TITLES)

    def data(self, index: ModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        """Text, tooltip, dimmed foreground for finished jobs, state dot, or the job itself."""
        if role not in _ROLES:  # a view asks for ~10 roles per cell; most are not served here
            return None
        row, rows = index.row(), self._rows
        if not index.isValid() or not 0 <= row < len(rows):
            return None
        job, column = rows[-1 - row], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return cell_text(job, column, self.node_label, self._now())
        if role == Qt.ItemDataRole.ForegroundRole:
            return _foreground(job, column)
        if role == Qt.ItemDataRole.DecorationRole:
            return self._dot(job.state) if column == JobColumn.STATE else None
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return _RIGHT if column == JobColumn.DURATION else None
        if role == Qt.ItemDataRole.ToolTipRole:
            return cell_tooltip(job, column, self.node_label, self._now())
        return job  # ROW_ROLE

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        """Column titles (Duration's aligned like its numbers); rows have no header."""
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(TITLES):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return TITLES[section]
        if role == Qt.ItemDataRole.TextAlignmentRole and section == JobColumn.DURATION:
            return Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        return None

    # Reading ----------------------------------------------------------------------------------

    def row_at(self, row: int) -> JobRecord:
        """The job shown at ``row`` (0 is the newest)."""
        return self._rows[len(self._rows) - 1 - row]

    def rows(self) -> list[JobRecord]:
        """Every job, newest first."""
        return self._rows[::-1]

    def get(self, key: str) -> JobRecord | None:
        """The job with ``key``, if shown."""
        position = self.position(key)
        return None if position is None else self.row_at(position)

    def position(self, key: str) -> int | None:
        """The row showing ``key``, if any."""
        sort_key = self._sort_keys.get(key)
        if sort_key is None:
            return None
        return len(self._rows) - 1 - bisect_left(self._order, sort_key)

    def count(self, state: JobState) -> int:
        """How many jobs are in ``state``."""
        return self._states[state]

    def finished_count(self) -> int:
        """How many jobs are finished (the history ``jobs:clear`` deletes)."""
        return sum(self._states[state] for state in TERMINAL)

    def engines(self) -> list[str]:
        """The engines among the jobs, sorted."""
        return sorted(self._engines)

    def nodes(self) -> list[str]:
        """The node ids the jobs name (origin, target or serving node)."""
        return list(self._nodes)

    def node_label(self, node_id: str | None) -> str:
        """A node's display name; an unknown node shows the start of its id."""
        if node_id is None:
            return "—"
        return self._names.get(node_id) or node_id[:8]

    def _dot(self, state: JobState) -> QIcon:
        key = (state, app_is_dark())  # a view repaints after the palette turns
        dot = self._dots.get(key)
        if dot is None:
            dot = self._dots[key] = state_dot(*key)
        return dot

    @property
    def ticking(self) -> bool:
        """Whether the Duration timer runs (only while a job is unfinished)."""
        return self._timer.isActive()

    def is_self(self, node_id: str) -> bool:
        """Whether ``node_id`` is this computer."""
        return node_id == self._self_id

    @property
    def self_id(self) -> str | None:
        """This computer's node id, once known."""
        return self._self_id

    def members(self) -> list[str]:
        """The other members of this node's cluster, by name."""
        return sorted(self._members, key=lambda node: (self.node_label(node).casefold(), node))

    # Changes ----------------------------------------------------------------------------------

    def upsert(self, job: JobRecord) -> None:
        """Insert a new job at its place, or replace a known one (``dataChanged`` if it differs)."""
        known = self._sort_keys.get(job.key)
        if known is not None and known != _sort_key(job):
            self.remove(job.key)  # created_at never changes; move it if it ever does
            known = None
        if known is None:
            self._insert(job)
        else:
            self._replace(bisect_left(self._order, known), job)
        self._after_change()

    def remove(self, key: str) -> bool:
        """Remove the job with ``key``; False when there was none."""
        sort_key = self._sort_keys.get(key)
        if sort_key is None:
            return False
        position = bisect_left(self._order, sort_key)
        row = len(self._rows) - 1 - position
        self.beginRemoveRows(_NO_PARENT, row, row)
        del self._sort_keys[key]
        del self._order[position]
        job = self._rows.pop(position)
        choices = self._count(job, -1)
        self.endRemoveRows()
        self._after_change(choices)
        return True

    def reset(self, jobs: Iterable[JobRecord]) -> None:
        """Replace every job at once (a new snapshot: one model reset)."""
        unique = sorted({job.key: job for job in jobs}.values(), key=_sort_key)
        before = (set(self._engines), set(self._nodes))
        self.beginResetModel()
        self._rows = unique
        self._order = [_sort_key(job) for job in unique]
        self._sort_keys = {
            job.key: sort_key for job, sort_key in zip(unique, self._order, strict=True)
        }
        self._live = set()
        for counter in (self._states, self._engines, self._nodes):
            counter.clear()
        for job in unique:
            self._count(job, +1)
        self.endResetModel()
        self._after_change(before != (set(self._engines), set(self._nodes)))

    def sync(self, jobs: Iterable[JobRecord]) -> None:
        """Make the table equal a snapshot with row-level changes only (no reset)."""
        wanted = {job.key: job for job in jobs}
        for key in [key for key in self._sort_keys if key not in wanted]:
            self.remove(key)
        for job in wanted.values():
            self.upsert(job)

    def clear(self) -> None:
        """Forget every job (the session ended)."""
        self.reset([])

    def set_node_names(self, names: Mapping[str, str], self_id: str | None = None) -> None:
        """Display names of nodes by id (merged into the known ones: a node that left keeps its
        name for the jobs it ran)."""
        changed = {node for node, name in names.items() if self._names.get(node) != name}
        self._names.update(names)
        if self_id is not None and self_id != self._self_id:
            self._self_id = self_id
            changed.add(self_id)
        if changed:
            self._refresh_names(changed)

    def set_members(self, members: Mapping[str, str]) -> None:
        """The other members of this node's cluster by id with their names (the list is
        replaced; the names join the known ones, so a member that left keeps its name)."""
        if dict(members) == self._members:
            return
        self._members = dict(members)
        self.set_node_names(members)
        self.choices_changed.emit()

    def tick(self) -> None:
        """Refresh the Duration of unfinished jobs (the timer calls this every second)."""
        last = len(self._rows) - 1
        rows = sorted(last - bisect_left(self._order, self._sort_keys[key]) for key in self._live)
        for first, end in _runs(rows, TICK_GAP):
            self.dataChanged.emit(
                self.index(first, JobColumn.DURATION),
                self.index(end, JobColumn.DURATION),
                _TEXT_ROLES,
            )

    # Internals --------------------------------------------------------------------------------

    def _insert(self, job: JobRecord) -> None:
        sort_key = _sort_key(job)
        position = bisect_left(self._order, sort_key)
        row = len(self._rows) - position
        self.beginInsertRows(_NO_PARENT, row, row)
        self._order.insert(position, sort_key)
        self._rows.insert(position, job)
        self._sort_keys[job.key] = sort_key
        choices = self._count(job, +1)
        self.endInsertRows()
        if choices:
            self.choices_changed.emit()

    def _replace(self, position: int, job: JobRecord) -> None:
        old = self._rows[position]
        if old == job:
            return
        self._rows[position] = job
        choices = self._count(old, -1) | self._count(job, +1)
        row = len(self._rows) - 1 - position
        self.dataChanged.emit(self.index(row, 0), self.index(row, len(TITLES) - 1))
        if choices:
            self.choices_changed.emit()

    def _count(self, job: JobRecord, delta: int) -> bool:
        """Update the tallies for ``job``; True when an engine or node appeared or went."""
        self._states[job.state] += delta
        if delta > 0 and job.state not in TERMINAL:
            self._live.add(job.key)
        else:
            self._live.discard(job.key)
        changed = _tally(self._engines, job.engine, delta)
        for node in {job.origin, job.target, job.serving}:
            if node is not None:
                changed |= _tally(self._nodes, node, delta)
        return changed

    def _after_change(self, choices: bool = False) -> None:
        if choices:
            self.choices_changed.emit()
        if self._live and not self._timer.isActive():
            self._timer.start()
        elif not self._live and self._timer.isActive():
            self._timer.stop()

    def _refresh_names(self, changed: set[str]) -> None:
        if self._rows and not changed.isdisjoint(self._nodes):
            self.dataChanged.emit(
                self.index(0, JobColumn.COMPUTER),  # and the timelines in the tooltips
                self.index(len(self._rows) - 1, JobColumn.DURATION),
                _TEXT_ROLES,
            )
        self.names_changed.emit()


def _sort_key(job: JobRecord) -> SortKey:
    return job.created_at, job.key


def _tally(counter: Counter[str], value: str, delta: int) -> bool:
    before = counter[value]
    counter[value] = before + delta
    if counter[value] <= 0:
        del counter[value]
    return (before > 0) != (counter.get(value, 0) > 0)


def _runs(rows: list[int], gap: int = 1) -> Iterator[tuple[int, int]]:
    """Sorted rows as (first, last) ranges; rows less than ``gap`` apart share a range."""
    start = previous = None
    for row in rows:
        if previous is None or row - previous > gap:
            if start is not None and previous is not None:
                yield start, previous
            start = row
        previous = row
    if start is not None and previous is not None:
        yield start, previous


def job_state_colour(state: JobState, dark: bool | None = None) -> QColor:
    """A job state's colour on a dark or light palette (None: the application's now)."""
    return state_colour(JOB_STATES[state], dark)


def state_dot(state: JobState, dark: bool | None = None) -> QIcon:
    """A dot in the state's colour (None: for the application's palette now)."""
    pixmap = QPixmap(32, 32)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(job_state_colour(state, dark))
    painter.drawEllipse(8, 8, 16, 16)
    painter.end()
    return QIcon(pixmap)


def _foreground(job: JobRecord, column: int) -> QColor | None:
    if job.state not in TERMINAL:
        return None
    if job.state == "failed" and column in (JobColumn.STATE, JobColumn.ERROR):
        return job_state_colour("failed")
    palette = QGuiApplication.palette()
    return palette.color(QPalette.ColorGroup.Active, QPalette.ColorRole.PlaceholderText)


class JobFilter(msgspec.Struct, frozen=True):
    """What the Jobs list shows: no ``states`` means every state; ``node`` matches the node a job
    was requested from, sent to or ran on; ``text`` is searched in the model, the error and a
    replica job's note."""

    states: frozenset[JobState] = msgspec.field(default_factory=frozenset)
    node: str | None = None
    engine: str | None = None
    text: str = ""

    @property
    def is_active(self) -> bool:
        """Whether anything is filtered out."""
        return bool(self.states or self.node or self.engine or self.text.strip())

    def predicate(self) -> Callable[[JobRecord], bool]:
        """A fast test for one job (checks only what is set)."""
        states, node, engine = self.states, self.node, self.engine
        needle = self.text.strip().casefold()

        def accepts(job: JobRecord) -> bool:
            if states and job.state not in states:
                return False
            if engine is not None and job.engine != engine:
                return False
            if node is not None and node not in (job.origin, job.target, job.serving):
                return False
            if needle and needle not in job.model.casefold():
                return needle in last_text(job).casefold()
            return True

        return accepts


class JobsFilterModel(QSortFilterProxyModel):
    """The jobs a ``JobFilter`` accepts, in the source's order (newest first; no sorting, so a
    filter change costs one O(1) test per job)."""

    filter_changed = Signal()

    def __init__(self, source: JobsModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._jobs = source
        self._filter = JobFilter()
        self._accepts = self._filter.predicate()
        self.setSourceModel(source)

    @property
    def filter(self) -> JobFilter:
        """The filter in use."""
        return self._filter

    def set_filter(self, job_filter: JobFilter) -> None:
        """Use ``job_filter``; nothing happens when it is the one in use."""
        if job_filter == self._filter:
            return
        self.beginFilterChange()
        self._filter = job_filter
        self._accepts = job_filter.predicate()
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        self.filter_changed.emit()

    def filterAcceptsRow(self, source_row: int, source_parent: ModelIndex) -> bool:
        """Whether the filter accepts the job at ``source_row``."""
        # Called once per job on every change: the model's own list, no method call.
        return self._accepts(self._jobs._rows[-1 - source_row])
