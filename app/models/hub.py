"""The model hub's Qt models: the shipped catalogue with its search, and what a search of
Hugging Face found (repositories, then one repository's GGUF files)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, QSortFilterProxyModel, Qt
from PySide6.QtGui import QColor, QFont

from app.catalog import CatalogEntry, format_size, matches, pulled_name
from app.models.keyed_table import ROW_ROLE, Column, KeyedTableModel, ModelIndex
from app.models.models import engine_title
from backend.protocol.types.hub import HubFile, HubModel

_SUGGESTED = QColor("#2e7d32")
_FONT_ROLE = Qt.ItemDataRole.FontRole


def _entry_tip(entry: CatalogEntry) -> str:
    names = ", ".join(
        f"{pulled_name(name)} ({engine_title(engine)})" for engine, name in entry.engines.items()
    )
    return f"{entry.name} by {entry.publisher}: {names}"


CATALOG_COLUMNS: tuple[Column[CatalogEntry], ...] = (
    Column("Model", lambda entry: entry.name, tooltip=_entry_tip),
    Column(
        "Size",
        lambda entry: f"≈ {format_size(entry.size_bytes)}",
        tooltip=lambda _entry: "Approximate download size",
    ),
    Column("Description", lambda entry: entry.description, tooltip=lambda entry: entry.description),
    Column("", lambda _entry: ""),  # the hub puts one Pull button per engine here
)


class CatalogModel(KeyedTableModel[str, CatalogEntry]):
    """The hub's entries keyed by id."""

    ACTIONS_COLUMN = 3

    def __init__(self, entries: tuple[CatalogEntry, ...], parent: QObject | None = None) -> None:
        super().__init__(CATALOG_COLUMNS, lambda entry: entry.id, parent)
        self.reset(entries)


class CatalogFilter(QSortFilterProxyModel):
    """Shows the entries whose name, publisher or description match the search words."""

    def __init__(self, source: CatalogModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._query = ""
        self.setSourceModel(source)

    def set_query(self, query: str) -> None:
        """Filter by ``query`` (words, any order, case-insensitive)."""
        if query != self._query:
            self.beginFilterChange()
            self._query = query
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def filterAcceptsRow(self, source_row: int, source_parent: ModelIndex) -> bool:
        """Rows whose entry matches the query."""
        entry = self.sourceModel().index(source_row, 0, source_parent).data(ROW_ROLE)
        return isinstance(entry, CatalogEntry) and matches(entry, self._query)


def count_text(count: int) -> str:
    """A count as the hub shows it: ``950``, ``12.3K``, ``4.1M``."""
    for suffix, factor in (("M", 1_000_000), ("K", 1_000)):
        if count >= factor:
            return f"{count / factor:.1f}{suffix}"
    return str(count)


def _updated(model: HubModel) -> str:
    return (model.updated or "")[:10]  # the ISO date, without the time


RESULT_COLUMNS: tuple[Column[HubModel], ...] = (
    Column("Repository", lambda model: model.repo, tooltip=lambda model: model.repo),
    Column(
        "Downloads",
        lambda model: count_text(model.downloads),
        tooltip=lambda model: f"{model.downloads:,} downloads in the last 30 days",
    ),
    Column("Likes", lambda model: count_text(model.likes)),
    Column("Updated", _updated),
)


class HubResultsModel(KeyedTableModel[str, HubModel]):
    """The repositories a Hugging Face search found, keyed by ``owner/name``."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(RESULT_COLUMNS, lambda model: model.repo, parent)


def quant_text(file: HubFile) -> str:
    """The file's quantization (``Q4_K_M``), or ``—`` when its name does not say."""
    return file.quant or "—"


def file_text(file: HubFile) -> str:
    """The file's name without its folder; a split model says how many parts it has."""
    name = file.name.rsplit("/", 1)[-1]
    return name if file.parts <= 1 else f"{name} ({file.parts} parts)"


class HubFilesModel(KeyedTableModel[str, HubFile]):
    """One repository's GGUF models keyed by name; the suggested one stands out."""

    def __init__(self, parent: QObject | None = None) -> None:
        columns: tuple[Column[HubFile], ...] = (
            Column("Quantization", quant_text, foreground=self._colour),
            Column("Size", lambda file: format_size(file.size), tooltip=self._size_tip),
            Column("File", file_text, tooltip=lambda file: file.name, foreground=self._colour),
        )
        super().__init__(columns, lambda file: file.name, parent)
        self.suggested: str | None = None

    def show_files(self, files: list[HubFile], suggested: str | None) -> None:
        """Show ``files`` (one reset: another repository's files are not comparable)."""
        self.suggested = suggested
        self.reset(files)

    def data(self, index: ModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        """As the base, with the suggested file in bold."""
        if role == _FONT_ROLE and index.isValid():
            file = self.row_at(index.row())
            if file.name == self.suggested:
                font = QFont()
                font.setBold(True)
                return font
        return super().data(index, role)

    def _colour(self, file: HubFile) -> QColor | None:
        return _SUGGESTED if file.name == self.suggested else None

    @staticmethod
    def _size_tip(file: HubFile) -> str:
        return f"{file.size:,} bytes" + (f" in {file.parts} files" if file.parts > 1 else "")
