"""The app's safety timeouts always outlast the backend's own deadlines.

The backend's deadlines are computed here from what the broker really uses (the bundled
manifests of every install method and the engine runner's constants); the app keeps one record
of them (``app.pending.BackendDeadlines``) and derives every RPC and pending timeout from it.
A backend deadline made longer without the app following fails here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.controllers import activity, add_node, engine_ops, errors, invitee, models
from app.models.engines import EngineCommand
from app.pending import BACKEND, BackendDeadlines
from backend.components.cluster.peer_client import TIMEOUT_S as PEER_HOP_S
from backend.components.engines.manifest import (
    INSTALL_METHODS,
    Action,
    Manifest,
    build,
    bundled_documents,
)
from backend.components.engines.runner import START_COMMAND_TIMEOUT_S


def manifests() -> Iterator[Manifest]:
    for name, document in bundled_documents().items():
        for method in INSTALL_METHODS:
            yield build(document, f"bundled {name}.json", method)


def action_s(action: Action) -> float:
    """How long the broker lets one model action run."""
    return action.http.timeout_s if action.http is not None else action.timeout_s


def stop_s(manifest: Manifest) -> float:
    # A stop command gets its grace and 10 s more; a signalled process its grace, then SIGKILL.
    return manifest.runtime.stop.grace_s + 10.0


def start_s(manifest: Manifest) -> float:
    runtime = manifest.runtime
    return len(runtime.start) * START_COMMAND_TIMEOUT_S + runtime.ready.timeout_s


def load_s(manifest: Manifest) -> float:
    if manifest.model_store is not None:  # a load relaunches the engine on the model
        return stop_s(manifest) + start_s(manifest)
    action = manifest.actions.get("load_model")
    return action_s(action) if action is not None else 0.0


def delete_s(manifest: Manifest, *, restarting: bool) -> float:
    action = manifest.actions.get("delete_model")
    if action is None or action.restart_after != restarting:
        return 0.0
    extra = stop_s(manifest) + start_s(manifest) if restarting else 0.0
    return action_s(action) + extra


def real_deadlines() -> dict[str, float]:
    """The backend's longest deadline of each kind, over every bundled manifest."""
    found = list(manifests())
    unload = [action_s(m.actions["unload_model"]) for m in found if "unload_model" in m.actions]
    return {
        "model_load": max(load_s(m) for m in found),
        "model_unload": max(unload),
        "model_delete": max(delete_s(m, restarting=False) for m in found),
        "delete_and_restart": max(delete_s(m, restarting=True) for m in found),
        "engine_start": max(start_s(m) for m in found),
        "engine_stop": max(stop_s(m) for m in found),
        "pull_silence": 60.0,  # actions.py: the download's first request
    }


@pytest.mark.parametrize("kind", sorted(real_deadlines()))
def test_the_apps_record_of_each_backend_deadline_is_not_shorter(kind: str) -> None:
    real = real_deadlines()[kind]
    assert real > 0, f"no bundled manifest has a {kind} deadline: the check checks nothing"
    assert getattr(BACKEND, kind) >= real, f"the backend allows {real} s for {kind}"


def test_a_cold_load_of_twelve_minutes_is_recorded() -> None:
    assert BackendDeadlines().model_load >= 12 * 60


def safety_nets() -> list[tuple[str, float, float]]:
    """(what, the app's timeout, the backend deadline it must outlast)."""
    restart = BACKEND.engine_restart
    delete = max(BACKEND.model_delete, BACKEND.delete_and_restart)
    pending = engine_ops.PENDING_TIMEOUTS_S
    nets = [
        ("load RPC", models.RPC_TIMEOUTS_S["load_model"], BACKEND.model_load),
        ("unload RPC", models.RPC_TIMEOUTS_S["unload_model"], BACKEND.model_unload),
        ("delete RPC", models.RPC_TIMEOUTS_S["delete_model"], delete),
        ("pull RPC", models.RPC_TIMEOUTS_S["pull_model"], models.PULL_DEADLINE_S),
        ("load spinner", models.PendingTimeouts().load, models.RPC_TIMEOUTS_S["load_model"]),
        ("LM Studio delete spinner", models.PendingTimeouts().lmstudio_delete, delete),
        ("unload spinner", models.PendingTimeouts().default, BACKEND.model_unload),
        ("delete spinner", models.PendingTimeouts().default, BACKEND.model_delete),
        ("pull silence", models.PendingTimeouts().default, BACKEND.pull_silence),
        ("engine command RPC", engine_ops.COMMAND_CALL_TIMEOUT_S, restart),
        ("start spinner", pending[EngineCommand.START], BACKEND.engine_start),
        ("stop spinner", pending[EngineCommand.STOP], BACKEND.engine_stop),
        ("restart spinner", pending[EngineCommand.RESTART], engine_ops.COMMAND_CALL_TIMEOUT_S),
        ("port move spinner", pending[EngineCommand.SET_PORT], engine_ops.COMMAND_CALL_TIMEOUT_S),
        ("update silence", pending[EngineCommand.UPDATE], restart),
        ("install silence", pending[EngineCommand.INSTALL], restart),
        ("tray start/stop RPC", activity.START_TIMEOUT_S, BACKEND.engine_start),
        ("banner start RPC", errors.ENGINE_START_TIMEOUT_S, BACKEND.engine_start),
        # Pairing: each request to the other computer is bounded by the peer client's timeout.
        ("cluster probe RPC", add_node.PROBE_TIMEOUT_S, PEER_HOP_S),  # its node-info
        ("invite RPC", add_node.INVITE_TIMEOUT_S, 2 * PEER_HOP_S),  # certificate, offer
        ("decline RPC", invitee.DECLINE_TIMEOUT_S, 2 * PEER_HOP_S),  # certificate, decline
        # certificate, start, confirm, finish, hello
        ("accept RPC", invitee.ACCEPT_TIMEOUT_S, 5 * PEER_HOP_S),
    ]
    assert set(pending) == set(EngineCommand), "every engine command has a safety net"
    return nets


@pytest.mark.parametrize(("what", "app_s", "backend_s"), safety_nets())
def test_every_app_safety_timeout_outlasts_the_backend(
    what: str, app_s: float, backend_s: float
) -> None:
    assert app_s > backend_s, f"the app's {what} ({app_s} s) gives up first ({backend_s} s)"


def test_a_pending_mark_outlasts_the_rpc_it_waits_for() -> None:
    # So the RPC's answer (or its own timeout, which names the action) ends the mark first.
    timeouts, rpc = models.PendingTimeouts(), models.RPC_TIMEOUTS_S
    assert timeouts.load > rpc["load_model"]
    assert timeouts.lmstudio_delete > rpc["delete_model"]
    assert timeouts.default > rpc["unload_model"]
    assert engine_ops.PENDING_TIMEOUTS_S[EngineCommand.START] > activity.START_TIMEOUT_S
