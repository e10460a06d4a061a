"""Node-info carries each running engine's weights digests and sizes (members find replicas of
one model by them), only of the models the engine lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from backend.components.engines.actions import ModelListing
from backend.components.engines.component import EnginesComponent
from backend.components.nodeinfo.payload import last_engine_models
from backend.core.rpc import ClientHub, NumberedStream
from backend.protocol import methods
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineModels
from backend.protocol.types.nodes import NodeEngineModels
from tests.fakes import FakeClock
from tests.unit.components.test_nodeinfo_payload import _Controller

QWEN = "sha256:" + "1" * 64


def test_node_info_has_the_digests_and_sizes_of_the_listed_models() -> None:
    engines = EnginesComponent(
        data_dir=Path("/nonexistent"),
        ledger=cast(Any, None),
        errors_sink=cast(Any, None),
        clock=FakeClock(),
        events=NumberedStream(methods.ENGINE_EVENT, ClientHub()),
    )
    engines.controllers = cast(
        Any, {"ollama": _Controller(running=True), "lmstudio": _Controller(running=True)}
    )
    engines._listed = {"ollama": ModelListing(["a", "b"]), "lmstudio": ModelListing(["c"])}
    ollama = EngineName("ollama")
    engines._last_models = EngineModels(
        models=["a", "b", "c"],
        by_engine={},
        loaded_by_engine={},
        slots_by_engine={},
        sizes_by_engine={ollama: {"a": 10, "b": 20, "gone": 5}},
        digests_by_engine={ollama: {"a": QWEN, "gone": QWEN}},
    )
    models = last_engine_models(engines)
    assert models["ollama"] == NodeEngineModels(
        models=["a", "b"], slots=1, digests={"a": QWEN}, sizes={"a": 10, "b": 20}
    )
    assert models["lmstudio"] == NodeEngineModels(models=["c"], slots=1)  # none known: omitted
