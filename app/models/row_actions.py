"""What a model row's Load, Eject and Delete buttons may do now, and in words: why one is
disabled, or what it does (a pure rule per button, so the view only shows the answer)."""

from __future__ import annotations

from typing import Literal

from app.models.models import ModelAction, ModelRow, engine_title, serves_one_model, supports

RowButton = Literal["load", "eject", "delete"]
_BUTTON_ACTIONS: dict[RowButton, ModelAction] = {
    "load": "load_model",
    "eject": "unload_model",
    "delete": "delete_model",
}


def blocked_reason(
    row: ModelRow, button: RowButton, *, pending: str | None, connected: bool
) -> str | None:
    """Why ``button`` cannot be used on ``row`` now, in a sentence (None: it can)."""
    title = engine_title(row.engine)
    if not supports(row.engine, _BUTTON_ACTIONS[button]):
        if serves_one_model(row.engine):
            return (
                f"{title} holds one model at a time and has no eject: load another model to "
                f"replace it, or stop {title} on the Engines page."
            )
        return f"{title} cannot {button} models from PAIR."
    if not row.reachable:
        return f"{row.node_name} cannot be reached"
    if not connected:
        return "The PAIR service is not running."
    if pending is not None:
        return f"{pending}… wait until it finishes."
    if button == "load" and row.loaded:
        return f"{title} serves this model now." if serves_one_model(row.engine) else "Loaded."
    if button == "eject" and not row.loaded:
        return "Not loaded: nothing to eject."
    return None


def action_tip(row: ModelRow, button: RowButton, served: str | None) -> str:
    """What ``button`` does to ``row`` (``served``: the model its engine serves now)."""
    title = engine_title(row.engine)
    if button == "load" and serves_one_model(row.engine):
        if served is None or served == row.model:
            return f"Serve {row.model} with {title} (it holds one model at a time)."
        return (
            f"Serve {row.model} instead of {served}: {title} holds one model at a time, so "
            "this replaces the model it serves now."
        )
    if button == "delete" and serves_one_model(row.engine) and row.loaded:
        return f"{title} serves this model now: it refuses to delete it until another is loaded."
    verbs = {"load": "Load into memory", "eject": "Unload from memory", "delete": "Delete from"}
    where = f" on {row.where}" if button == "delete" else ""
    return f"{verbs[button]}{' disk' if button == 'delete' else ''}{where}."


# The engines that can spread one model over several members (llama.cpp's RPC backend).
_SPREADS: frozenset[str] = frozenset({"llamacpp"})


def can_spread(row: ModelRow) -> bool:
    """Whether ``row`` offers "Spread…": a model file of this computer's spreading engine."""
    return row.local and row.engine in _SPREADS


def spread_blocked_reason(
    row: ModelRow, *, pending: str | None, connected: bool, members: int, reachable: int
) -> str | None:
    """Why "Spread…" cannot be used on ``row`` now (None: it can); ``members`` is how many
    other members there are, ``reachable`` how many of them can be reached."""
    if not connected:
        return "The PAIR service is not running."
    if pending is not None:
        return f"{pending}… wait until it finishes."
    if row.spread is not None and row.spread.state == "running":
        return "Spread over its members now (the Status column says who holds what)."
    if members == 0:
        return (
            "No other computer is paired with this one: pair one on the Cluster page to "
            "spread a model over it."
        )
    if reachable == 0:
        return "No other member can be reached now: a spread needs at least one of them."
    return None


def spread_action_tip(row: ModelRow) -> str:
    """What "Spread…" does to ``row``."""
    return (
        f"Load {row.model} with {engine_title(row.engine)} spread over this computer and "
        "members you choose: for a model bigger than one computer's memory."
    )
