"""Peers' node-info answers through the real decoders: a ``NodeInfo`` or the error its caller
handles, for mutations of a real payload (wrong types, missing fields, huge numbers, long
strings, deep nesting) and for mangled bytes.

Two paths read node-info: discovery's probe (``parse_json`` then ``node_info_of``, refusing
with ``ProbeFailed``) and the cluster's peer client (``decode_answer``, refusing with
``PeerUnreachable``). Whatever decodes must then reduce to telemetry and ports and encode again.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

import msgspec
from hypothesis import given

from backend.components.cluster import peer_client
from backend.components.discovery import probe
from backend.components.discovery.state import reduce_telemetry
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.types.nodes import (
    NodeCpu,
    NodeEngineModels,
    NodeGpu,
    NodeInfo,
    NodeMemory,
    NodeOs,
)
from tests.fuzz import strategies as fuzz
from tests.fuzz.budget import EXAMPLES, fuzz_settings, measured, timeout_for
from tests.fuzz.strategies import replace_somewhere

REAL = NodeInfo(
    node_id=NodeId(str(uuid.UUID(int=42))),
    name="studio",
    version="0.9.0",
    os=NodeOs(system="Linux", release="6.1", machine="x86_64"),
    cpu=NodeCpu(name="Ryzen", cores=16, utilization_percent=12.5),
    memory=NodeMemory(total_bytes=64 << 30, used_bytes=20 << 30),
    gpus=[NodeGpu(vendor="nvidia", name="RTX", vram_total_bytes=24 << 30, utilization_percent=3.0)],
    telemetry_valid=True,
    telemetry_age_ms=120,
    cluster_id="c1",
    ports=Ports(node=14320, ollama=11434, openai=1234, llamacpp=8080),
    engines={"ollama": NodeEngineModels(models=["llama3:latest"], loaded=[])},
    pending_jobs=2,
    fingerprint="sha256:ab",
)
REAL_DOCUMENT: dict[str, Any] = msgspec.to_builtins(REAL)
REAL_BYTES = msgspec.json.encode(REAL)

# Nesting the decoders survive; deeper is ``test_deeply_nested_node_info_is_refused``.
SHALLOW = 200


def make_input(rng: random.Random) -> bytes:
    """A mutation of the real payload, its bytes mangled, nesting, or plain junk."""
    roll = rng.random()
    if roll < 0.6:
        document: Any = REAL_DOCUMENT
        for _ in range(rng.randint(1, 4)):
            document = replace_somewhere(rng, document, fuzz.value(rng))
        return fuzz.encode(rng, document)
    if roll < 0.8:
        return fuzz.mutate(rng, REAL_BYTES)
    if roll < 0.9:
        depth = rng.randint(1, SHALLOW)
        return REAL_BYTES[:-1] + b',"x":' + b"[" * depth + b"]" * depth + b"}"
    if roll < 0.95:
        return fuzz.deep(rng, max_depth=SHALLOW)
    return rng.randbytes(rng.randint(0, 64))


def decode_like_probe(body: bytes) -> NodeInfo | None:
    """discovery/probe.py: ``parse_json`` then ``node_info_of``; None for a refusal."""
    try:
        return probe.node_info_of("peer", probe.parse_json("https://peer/v1/node-info", body))
    except probe.ProbeFailed:
        return None


def decode_like_peer_client(body: bytes) -> NodeInfo | None:
    """cluster/peer_client.py ``decode_answer``; None for a refusal."""
    try:
        return peer_client.decode_answer("https://peer/v1/node-info", 200, body, NodeInfo)
    except peer_client.PeerUnreachable:
        return None


def _usable(info: NodeInfo | None) -> None:
    if info is not None:
        assert isinstance(info, NodeInfo) and isinstance(info.ports, Ports)
        reduce_telemetry(info)
        msgspec.json.encode(info)  # as the discovery stream pushes it


def _check(body: bytes) -> None:
    _usable(decode_like_probe(body))
    _usable(decode_like_peer_client(body))


# Found by this fuzz test: both decoders raised RecursionError (which neither caller caught)
# on a body nested a few hundred levels deep, well inside the 1 MiB body limit.
DEEP = REAL_BYTES[:-1] + b',"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@timeout_for(EXAMPLES, 0.05)
def test_node_info_decodes_or_is_refused() -> None:
    with measured("node-info", peak_limit=32 << 20) as bounds:

        @fuzz_settings()
        @given(fuzz.rngs)
        def run(rng: fuzz.SeededRandom) -> None:
            body = make_input(rng)
            with bounds.example():
                _check(body)

        run()


def test_a_lone_surrogate_in_node_info_is_refused() -> None:
    # Found by this fuzz test: the probe's json.loads accepted a "\ud800" escape; in a key,
    # msgspec.convert raised UnicodeEncodeError, and a node_id holding it decoded, then failed
    # wherever the node was encoded (the discovery push to every client).
    assert decode_like_probe(b'{"\\ud800": null}') is None
    assert decode_like_probe(REAL_BYTES.replace(REAL.node_id.encode(), b"\\ud800")) is None
    assert decode_like_peer_client(REAL_BYTES.replace(REAL.node_id.encode(), b"\\ud800")) is None


def test_deeply_nested_node_info_is_refused() -> None:
    assert decode_like_probe(DEEP) is None
    assert decode_like_peer_client(DEEP) is None


def test_the_real_payload_decodes_both_ways() -> None:
    assert decode_like_probe(REAL_BYTES) == REAL
    assert decode_like_peer_client(REAL_BYTES) == REAL
