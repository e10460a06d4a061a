"""The routing table's weights digests: a local target's from its engine's listing, a peer's
from its node-info (only of models the target lists), and the aliases passed on as given."""

from __future__ import annotations

from backend.components.proxy.table import LocalEngine, TableSource, build_table, node_targets
from backend.protocol.types.nodes import NodeEngineModels
from tests.unit.proxy.test_table import TRUSTED, _node

QWEN = "sha256:" + "1" * 64
OTHER = "sha256:" + "2" * 64


def test_a_local_target_carries_the_digests_of_the_models_it_lists() -> None:
    local = {
        "llamacpp": LocalEngine(
            "http://127.0.0.1:1",
            ["qwen2.5-7b-instruct-q4_k_m"],
            digests={"qwen2.5-7b-instruct-q4_k_m": QWEN, "deleted-since": OTHER},
        ),
        "ollama": LocalEngine("http://127.0.0.1:2", ["m"]),
    }
    table = build_table(node_id="me", local=local, nodes=[], loads={}, generation=1)
    assert table.engines["llamacpp"][0].digests == {"qwen2.5-7b-instruct-q4_k_m": QWEN}
    assert table.engines["ollama"][0].digests == {}


def test_a_peer_target_carries_the_digests_its_node_info_reports() -> None:
    listed = NodeEngineModels(
        models=["qwen2.5:7b", "llama3.2:latest"],
        digests={"qwen2.5:7b": QWEN, "not-listed": OTHER},
        sizes={"qwen2.5:7b": 4_683_087_332},
    )
    node = _node().__replace__(engines={"ollama": listed})
    assert node_targets(node, TRUSTED)["ollama"].digests == {"qwen2.5:7b": QWEN}
    bare = _node().__replace__(engines={"ollama": NodeEngineModels(models=["a"])})
    assert node_targets(bare, TRUSTED)["ollama"].digests == {}


def test_the_aliases_reach_the_table() -> None:
    table = build_table(
        node_id="me", local={}, nodes=[], loads={}, generation=1, aliases={"coder": "qwen2.5:7b"}
    )
    assert table.aliases == {"coder": "qwen2.5:7b"}
    assert build_table(node_id="me", local={}, nodes=[], loads={}, generation=1).aliases == {}
    source = TableSource(
        node_id=lambda: "me",
        local=dict,
        nodes=list,
        loads=dict,
        timeouts=lambda: (1.0, 1.0),
        aliases=lambda: {"fast": "llama3.2:latest"},
    )
    assert source().aliases == {"fast": "llama3.2:latest"}
