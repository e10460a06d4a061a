"""The typed contract: params and results convert through the declarations, events are tagged
unions on the wire, and every declared name is documented in docs/RPC.md."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from backend.core.broker_rpc import Uptime
from backend.protocol import errors, methods
from backend.protocol.contract import NO_PARAMS, NoParams
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.types.engines import EngineRef, EngineStatus
from backend.protocol.types.jobs import JobRemoved
from backend.protocol.types.nodes import NodeLeft, NodeTelemetryChanged

ROOT = Path(__file__).resolve().parents[3]
RPC_DOC = ROOT / "docs" / "RPC.md"


def _status(name: str) -> dict[str, object]:
    return {
        "engine": name,
        "display_name": name.title(),
        "front_door": "ollama",
        "mode": "process",
        "installed": True,
        "state": "stopped",
        "port": 11435,
        "default_port": 11435,
    }


def test_params_are_converted_by_the_declaration_and_a_bad_field_is_named() -> None:
    params = methods.ENGINE_START.convert_params({"engine": "ollama"})
    assert params == EngineRef(engine=EngineName("ollama"))
    with pytest.raises(errors.InvalidParams, match=r"engine:start.*engine"):
        methods.ENGINE_START.convert_params({"engine": 5})
    with pytest.raises(errors.InvalidParams, match="must be an object"):
        methods.ENGINE_START.convert_params(["ollama"])
    assert methods.PING.convert_params(None) == NoParams()


def test_no_params_go_on_the_wire_as_absent_and_structs_as_objects() -> None:
    assert methods.PING.encode_params(None) is None
    assert methods.PING.encode_params(NO_PARAMS) is None
    encoded = methods.ENGINE_START.encode_params(EngineRef(engine=EngineName("ollama")))
    assert encoded == {"engine": "ollama"}


def test_results_decode_to_their_single_declared_type() -> None:
    one = methods.ENGINE_STATUS.decode_result(_status("ollama"))
    assert isinstance(one, EngineStatus) and one.engine == "ollama"
    many = methods.ENGINE_LIST.decode_result([_status("ollama"), _status("lmstudio")])
    assert [status.engine for status in many] == ["ollama", "lmstudio"]
    with pytest.raises(errors.BadResult, match="engine:status"):
        methods.ENGINE_STATUS.decode_result([_status("ollama")])  # a list is not one status
    assert methods.ERRORS_CLEAR.decode_result(None) is None


def test_push_events_are_tagged_unions_on_the_wire() -> None:
    left = msgspec.to_builtins(NodeLeft(seq=4, node_id=NodeId("n1")))
    assert left == {"seq": 4, "node_id": "n1", "event": "node_left"}
    decoded = methods.DISCOVERY_EVENT.decode(left)
    assert isinstance(decoded, NodeLeft) and decoded.seq == 4
    telemetry = methods.DISCOVERY_EVENT.decode(
        {"event": "node_telemetry", "seq": 5, "node_id": "n"}
    )
    assert isinstance(telemetry, NodeTelemetryChanged)
    removed = methods.JOBS_EVENT.decode({"event": "remove", "seq": 1, "key": "a/b/1"})
    assert isinstance(removed, JobRemoved)
    with pytest.raises(errors.BadResult, match="engine:event"):
        methods.ENGINE_EVENT.decode({"event": "exploded", "seq": 1})


def test_names_are_unique() -> None:
    names = [method.name for method in methods.all_methods()]
    pushes = [push.name for push in methods.all_pushes()]
    assert len(names) == len(set(names)) and len(pushes) == len(set(pushes))
    assert len(names) > 30


def _documented_names() -> set[str]:
    """Every name in the first column of a table row of docs/RPC.md (`a` / `b` rows too)."""
    found: set[str] = set()
    for line in RPC_DOC.read_text().splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            found.update(re.findall(r"`([a-z/:-]+)`", first_cell))
    return found


def test_every_declared_method_and_push_is_documented() -> None:
    documented = _documented_names()
    declared = {m.name for m in methods.all_methods()} | {p.name for p in methods.all_pushes()}
    assert sorted(declared - documented) == [], "declared but not in docs/RPC.md"


def test_every_documented_method_is_declared() -> None:
    declared = {m.name for m in methods.all_methods()} | {p.name for p in methods.all_pushes()}
    rpc_names = {name for name in _documented_names() if ":" in name or "/" in name}
    rpc_names |= {name for name in _documented_names() if name in ("ping", "version", "status")}
    node_api_paths = {name for name in rpc_names if name.startswith("/")}
    assert sorted(rpc_names - node_api_paths - declared) == [], "in docs/RPC.md, not declared"


async def _registered_methods(data_dir: Path) -> set[str]:
    """What a broker built on ``data_dir`` routes: the node is built, never started."""
    from backend.components.cluster.members import Members, MemberStore
    from backend.components.identity.certificate import NoVault, load_or_mint
    from backend.components.identity.identity import load_identity
    from backend.core.store import Store
    from backend.wiring import BrokerConfig, Foundation, build_node
    from tests.fakes import FakeClock

    clock = FakeClock()
    store = Store(data_dir / "pair.db")
    await store.open()
    try:
        identity = await load_identity(store, data_dir, clock=clock)
        members = Members(MemberStore(store))
        await members.open()
        credentials = load_or_mint(data_dir, identity.node_id, first_run=True, vault=NoVault())
        ports = Ports(node=0, ollama=0, openai=0, llamacpp=0, relay=0)
        node = build_node(
            Foundation(
                config=BrokerConfig(data_dir=data_dir, ports=ports),
                extra_workers=(),
                store=store,
                identity=identity,
                credentials=credentials,
                members=members,
                clock=clock,
                started_at=clock.wall(),
                uptime_ms=Uptime(clock, clock.monotonic()),
                control_address=str(data_dir / "control.sock"),
                request_shutdown=lambda: None,
            )
        )
        return set(node.dispatcher.methods())
    finally:
        await store.close()


async def test_the_registered_methods_are_the_declared_and_the_documented_ones(
    tmp_path: Path,
) -> None:
    registered = await _registered_methods(tmp_path)
    declared = {m.name for m in methods.all_methods()}
    documented = _documented_names()
    pushes = {p.name for p in methods.all_pushes()}
    documented_methods = {
        name for name in documented - pushes if (":" in name or "/" in name) and name[0] != "/"
    } | {name for name in documented if name in ("ping", "version", "status", "shutdown")}
    assert len(registered) > 30
    assert sorted(registered - declared) == [], "routed but not declared in methods.py"
    assert sorted(declared - registered) == [], "declared but no broker routes it"
    assert sorted(registered - documented) == [], "routed but not in docs/RPC.md"
    assert sorted(documented_methods - registered) == [], "in docs/RPC.md, but not routed"
