"""One model is one model: aliases and weights' digests across engines, in routing."""

from __future__ import annotations

from backend.protocol.proxy import AwayModels, ProxyTargets, RouteTarget, TargetKind
from backend.workers.proxy.routing.candidates import away_owner, candidates, owners
from backend.workers.proxy.routing.identity import name_at, resolve
from backend.workers.proxy.routing.pins import pinned
from backend.workers.proxy.routing.send import with_model

QWEN = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
GGUF = "qwen2.5-7b-instruct-q4_k_m.gguf"


def _target(
    node: str,
    models: list[str],
    digests: dict[str, str] | None = None,
    kind: TargetKind = "peer",
) -> RouteTarget:
    return RouteTarget(
        node_id=node,
        kind=kind,
        base_url=f"https://{node}:1",
        name=node,
        models=models,
        digests=digests or {},
    )


TABLE = ProxyTargets(
    node_id="me",
    engines={
        "ollama": [
            _target("me", ["qwen2.5:7b", "tiny"], {"qwen2.5:7b": QWEN}, "local"),
            _target("mac", ["llama3:latest"], {"llama3:latest": OTHER}),
        ],
        "llamacpp": [_target("gpu", [GGUF, "embed.gguf"], {GGUF: QWEN})],
        "lmstudio": [_target("studio", ["qwen2.5-7b@q4_k_m"], {"qwen2.5-7b@q4_k_m": QWEN})],
    },
    aliases={"coder": "qwen2.5:7b", "tiny": "llama3", "chat": "embed.gguf"},
)


def _nodes(found: list[RouteTarget]) -> list[tuple[str, str]]:
    return [(t.node_id, t.engine) for t in found]


def test_a_digest_makes_every_name_of_the_weights_one_model_on_every_engine() -> None:
    everywhere = [("me", "ollama"), ("gpu", "llamacpp"), ("studio", "lmstudio")]
    assert _nodes(owners(TABLE, "qwen2.5:7b")) == everywhere
    assert _nodes(owners(TABLE, GGUF)) == everywhere
    assert _nodes(owners(TABLE, "qwen2.5-7b@q4_k_m")) == everywhere
    identity = resolve(TABLE, GGUF)
    assert identity.digests == {QWEN}
    assert ("ollama", "qwen2.5:7b") in identity.names


def test_ollamas_naming_rule_still_applies_to_a_replicas_name() -> None:
    assert _nodes(owners(TABLE, "QWEN2.5:7B")) == _nodes(owners(TABLE, GGUF))
    assert _nodes(owners(TABLE, "llama3")) == [("mac", "ollama")]


def test_a_model_without_a_digest_is_only_its_own_name() -> None:
    assert _nodes(owners(TABLE, "embed.gguf")) == [("gpu", "llamacpp")]
    identity = resolve(TABLE, "embed.gguf")
    assert identity.plain and identity.digests == frozenset()
    assert owners(TABLE, "nothing-anywhere") == []


def test_an_alias_reaches_every_replica_of_its_target() -> None:
    assert _nodes(owners(TABLE, "coder")) == _nodes(owners(TABLE, "qwen2.5:7b"))
    assert resolve(TABLE, "coder").model == "qwen2.5:7b"
    assert resolve(TABLE, "coder:latest").model == "qwen2.5:7b", "as an Ollama client sends it"
    assert _nodes(owners(TABLE, "chat")) == [("gpu", "llamacpp")]


def test_an_alias_never_hides_a_name_a_node_lists() -> None:
    # ``tiny`` is an alias of llama3, but this node's Ollama lists a model named tiny.
    assert _nodes(owners(TABLE, "tiny")) == [("me", "ollama")]
    assert resolve(TABLE, "tiny").model == "tiny"


def test_each_node_is_sent_its_own_name_and_a_name_it_lists_as_asked_is_kept() -> None:
    found = {t.node_id: t for t in owners(TABLE, "coder")}
    assert name_at(found["me"], "coder") == "qwen2.5:7b"
    assert name_at(found["gpu"], "coder") == GGUF
    assert name_at(found["studio"], "coder") == "qwen2.5-7b@q4_k_m"
    asked = "Qwen2.5:7B"
    found = {t.node_id: t for t in owners(TABLE, asked)}
    assert name_at(found["me"], asked) is asked, "Ollama lists it so: nothing to rewrite"
    assert name_at(found["gpu"], asked) == GGUF


def test_a_plain_table_leaves_every_name_as_asked() -> None:
    plain = ProxyTargets(engines={"ollama": [_target("me", ["tiny"], kind="local")]})
    found = owners(plain, "tiny")
    assert _nodes(found) == [("me", "ollama")]
    assert name_at(found[0], "tiny") == "tiny"
    assert resolve(plain, "tiny").plain


def test_one_engine_per_node_preferring_the_clients_dialect_then_engine_order() -> None:
    both = ProxyTargets(
        engines={
            "ollama": [_target("box", ["qwen2.5:7b"], {"qwen2.5:7b": QWEN})],
            "llamacpp": [_target("box", [GGUF], {GGUF: QWEN})],
        }
    )
    assert _nodes(owners(both, GGUF, "ollama")) == [("box", "ollama")]
    assert _nodes(owners(both, "qwen2.5:7b", "openai")) == [("box", "llamacpp")]
    assert _nodes(candidates(both, "qwen2.5:7b", "anthropic")) == [("box", "llamacpp")]


def test_pins_work_with_any_name_of_the_model() -> None:
    pin = pinned(TABLE, "llamacpp/qwen2.5:7b", "openai")
    assert pin is not None and _nodes(pin.only) == [("gpu", "llamacpp")]
    assert name_at(pin.only[0], pin.model) == GGUF
    pin = pinned(TABLE, "coder@studio", "openai")
    assert pin is not None and _nodes(pin.only) == [("studio", "lmstudio")]
    assert pinned(TABLE, "ollama/embed.gguf", "openai") is None, "no replica there"


def test_a_member_away_with_an_aliases_target_is_found_by_the_alias() -> None:
    table = ProxyTargets(
        away=[AwayModels(node_id="mac", name="mac", engine="ollama", models=["llama3:latest"])],
        aliases={"big": "llama3"},
    )
    found = away_owner(table, "big")
    assert found is not None and found.node_id == "mac"
    assert away_owner(table, "small") is None


def test_the_body_names_the_targets_model_only_when_rewritten() -> None:
    body = b'{"model":"coder","messages":[],"stream":true}'
    rewritten = with_model(body, GGUF)
    assert rewritten == b'{"model":"' + GGUF.encode() + b'","messages":[],"stream":true}'
    assert with_model(b"[1,2]", GGUF) == b"[1,2]"
    assert with_model(b"not json", GGUF) == b"not json"
