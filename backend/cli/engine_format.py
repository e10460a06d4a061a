"""How the engine and model commands say what happened: one line after a call, the rows of
``pair engine status``, and what ``pair engine versions`` advises."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from backend.cli.node_ref import SHORT_ID, KnownNode, on_node
from backend.cli.spread_format import spread_lines
from backend.protocol.types.engines import (
    EngineActionName,
    EngineActionParams,
    EngineActionResult,
    EngineModels,
    EngineStatus,
    EngineVersions,
    ModelDetails,
    SpreadStatus,
)

WANTED = {True: "on", False: "off", None: "-"}
# ``pair engines``: each column's title and least width (a longer value widens its column).
ENGINE_COLUMNS = (
    ("ENGINE", 10),
    ("STATE", 15),
    ("PORT", 7),
    ("PID", 9),
    ("SLOTS", 7),
    ("BACKEND", 10),
    ("WANTED", 8),
    ("DETAIL", 0),
)
# ``pair models``: FILE is what a model store reads in the file (size, architecture,
# quantization, trained context); STATE whether it is loaded.
MODEL_COLUMNS = (("COMPUTER", 15), ("ENGINE", 10), ("MODEL", 24), ("FILE", 0), ("STATE", 0))
COLUMN_GAP = 2


class ModelOperation(NamedTuple):
    """A ``pair model`` operation: the ``engine:action`` it sends and what it says after."""

    action: EngineActionName
    done: str
    help: str


def describe_state(status: EngineStatus, member: KnownNode | None = None, done: str = "") -> str:
    """``Ollama on bob: updated, running on port 11435``: an engine after a call, in a line."""
    where = f" on port {status.port}" if status.state == "running" else ""
    adopted = " (adopted: not started by PAIR)" if status.adopted else ""
    return f"{status.display_name}{on_node(member)}: {done}{status.state}{where}{adopted}"


def engine_row(status: EngineStatus) -> tuple[str, ...]:
    """An engine's cells in ``pair engines``, in ``ENGINE_COLUMNS`` order."""
    state = status.state + (" (adopted)" if status.adopted else "")
    detail = status.error or status.binary or "not installed"
    pid, slots = status.pid or "-", status.slots or "-"
    return (
        status.engine,
        state,
        str(status.port),
        str(pid),
        str(slots),
        status.backend or "-",
        WANTED[status.desired],
        detail,
    )


def column_widths(columns: Sequence[tuple[str, int]], rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's width: its least width, and at least ``COLUMN_GAP`` past its longest
    cell or title, so no value ever runs into the next column."""
    return [
        max(least, *(len(row[n]) + COLUMN_GAP for row in rows), len(title) + COLUMN_GAP)
        for n, (title, least) in enumerate(columns)
    ]


def table_line(cells: Sequence[str], widths: Sequence[int]) -> str:
    """One line of a table: every cell but the last padded to its width, and never closer
    than ``COLUMN_GAP`` to the next cell."""
    padded = [
        cell.ljust(max(width, len(cell) + COLUMN_GAP))
        for cell, width in zip(cells[:-1], widths, strict=False)
    ]
    return "".join([*padded, cells[-1]])


def describe_uninstalled(status: EngineStatus, member: KnownNode | None = None) -> str:
    """``pair engine uninstall``: done, the models kept, and a copy PAIR did not install."""
    found = f" at {status.binary}" if status.binary else ""
    elsewhere = f"; a copy PAIR did not install is still there{found}" if status.installed else ""
    return f"{status.display_name}{on_node(member)}: uninstalled, the models stay{elsewhere}"


def describe_status(status: EngineStatus, member: KnownNode | None = None) -> str:
    """``pair engine status``: the state line, then what is known of the engine, a row each."""
    default = "" if status.port == status.default_port else f" (default {status.default_port})"
    rows: list[tuple[str, object]] = [
        ("installed", status.binary or ("yes" if status.installed else "no")),
        ("port", f"{status.port}{default}"),
        ("pid", status.pid),
        ("slots", status.slots),
        ("wanted", {True: "running", False: "stopped", None: "not set"}[status.desired]),
        ("error", status.error),
    ]
    lines = [f"  {name:<11}{value}" for name, value in rows if value is not None]
    return "\n".join([describe_state(status, member), *lines])


def describe_model_action(
    operation: ModelOperation,
    params: EngineActionParams,
    result: EngineActionResult,
    member: KnownNode | None = None,
) -> str:
    """``phi3:mini is deleted from ollama on bob; ...``: what a ``pair model`` call did."""
    text = f"{params.model} {operation.done} {params.engine}{on_node(member)}"
    if operation.action != "delete_model":
        return text
    if result.restarted:
        return f"{text}; {params.engine} was restarted to pick the change up"
    return f"{text}; {params.engine} did not need a restart"


def describe_model_facts(details: ModelDetails | None, size: int | None) -> str:
    """``0.5 MB  llama  F32  trained ctx 2048``: what a model's file says, for ``pair models``
    (the context it was trained for, not the ``llamacpp_context`` it is run with); empty for a
    model its engine tells nothing of (only model stores read their files)."""
    if details is None:
        return ""
    trained = details.context_length
    facts = [
        describe_size(size) if size is not None else None,
        details.architecture,
        details.quantization,
        f"trained ctx {trained}" if trained is not None else None,
    ]
    return "  ".join(fact for fact in facts if fact)


def model_rows(models: EngineModels, computer: str) -> list[tuple[str, ...]]:
    """``pair models``: a row per model of each running engine, in ``MODEL_COLUMNS`` order."""
    rows: list[tuple[str, ...]] = []
    for engine, names in sorted(models.by_engine.items()):
        loaded = set(models.loaded_by_engine.get(engine, []))
        slots = models.slots_by_engine.get(engine, {})
        details = models.details_by_engine.get(engine, {})
        sizes = models.sizes_by_engine.get(engine, {})
        for name in names or ["(no models)"]:
            state = f"loaded, {slots.get(name, '?')} slots" if name in loaded else ""
            facts = describe_model_facts(details.get(name), sizes.get(name))
            rows.append((computer, engine, name, facts, state))
    return rows


def models_table(
    rows: Sequence[Sequence[str]], spreads: Mapping[str, SpreadStatus] | None = None
) -> str:
    """The rows of ``model_rows`` under a header, in columns; a model its engine runs spread
    over members (``spreads``, by engine) has its shares on the lines under its row."""
    widths = column_widths(MODEL_COLUMNS, rows)
    lines = [table_line([title for title, _ in MODEL_COLUMNS], widths)]
    for row in rows:
        lines.append(table_line(row, widths).rstrip())
        spread = (spreads or {}).get(row[1])  # the row's engine
        if spread is not None and spread.model == row[2]:  # and model
            lines += spread_lines(spread)
    return "\n".join(lines)


def describe_size(size: int) -> str:
    """Bytes as people read them: ``512 B``, ``0.5 MB``, ``4.1 GB`` (powers of 1000)."""
    if size < 1000:
        return f"{size} B"
    for unit, scale in (("kB", 1e3), ("MB", 1e6), ("GB", 1e9)):
        if size < scale * 1000:
            return f"{size / scale:.1f} {unit}"
    return f"{size / 1e12:.1f} TB"


def describe_versions(versions: EngineVersions, member: KnownNode | None = None) -> str:
    """``pair engine versions``: the installed and the latest version, and what to do next."""
    lines = [
        f"{versions.engine}{on_node(member)}: installed {versions.installed or 'unknown'}, "
        f"latest {versions.latest or 'unknown'}"
    ]
    reason = f": {versions.reason}" if versions.reason else ""
    if versions.update_available and versions.can_update:
        node = f" --node {member.node_id[:SHORT_ID]}" if member is not None else ""
        lines.append(f"An update is available: `pair engine update {versions.engine}{node}`.")
    elif versions.update_available:
        lines.append(f"An update is available, but PAIR cannot install it{reason}.")
    elif versions.installed and versions.latest:
        lines.append("Up to date.")
    elif versions.reason:
        lines.append(versions.reason[:1].upper() + versions.reason[1:])
    return "\n".join(lines)
