"""A manifest's ``slots`` block: every bad value is refused with the manifest and the field."""

from __future__ import annotations

from typing import Any

import pytest

from backend.components.engines.manifest import ManifestError, build, bundled_documents

SOURCE = "override ollama.json"


def with_slots(engine: str, slots: Any) -> dict[str, Any]:
    return {**bundled_documents()[engine], "slots": slots}


def test_the_bundled_slot_blocks_are_valid() -> None:
    for name, document in bundled_documents().items():
        assert build(document, f"bundled {name}.json").slots.default >= 1


@pytest.mark.parametrize(
    ("slots", "says"),
    [
        ({"source": "env", "env": "OLLAMA_NUM_PARALLEL", "default": 0}, "slots.default"),
        ({"source": "loaded_instances", "default": -4}, "slots.default must be at least 1"),
        ({"source": "env", "default": 1}, "slots.env"),
        ({"source": "env", "env": "", "default": 1}, "slots.env"),
        ({"source": "env", "env": "NOT A NAME", "default": 1}, "slots.env"),
        ({"source": "args", "default": 1}, "slots.flags"),
        ({"source": "args", "flags": [""], "default": 1}, "slots.flags"),
        ({"source": "args", "props": "props", "default": 1}, "slots.props"),
        ({"source": "env", "env": "N", "default": 1, "parallel": 2}, "unknown field `parallel`"),
        ({"source": "magic", "default": 1}, "$.slots.source"),
        ({"source": "env", "env": "N", "default": "2"}, "$.slots.default"),
        ({"source": "env", "env": "N", "default": True}, "$.slots.default"),
        ({"source": "env", "env": "N", "default": 1.5}, "$.slots.default"),
        ({"source": "args", "flags": "-np", "default": 1}, "$.slots.flags"),
        ("four", "$.slots"),
    ],
)
def test_a_bad_slots_block_is_refused_naming_the_manifest_and_the_field(
    slots: Any, says: str
) -> None:
    with pytest.raises(ManifestError) as refused:
        build(with_slots("ollama", slots), SOURCE)
    message = str(refused.value)
    assert message.startswith(f"{SOURCE}: "), message
    assert says in message, message


def test_a_manifest_without_slots_is_refused() -> None:
    document = dict(bundled_documents()["ollama"])
    del document["slots"]
    with pytest.raises(ManifestError, match=r"override ollama\.json: .*`slots`"):
        build(document, SOURCE)


def test_good_blocks_of_each_source_are_taken() -> None:
    env = build(with_slots("ollama", {"source": "env", "env": "N", "default": 2}), SOURCE)
    assert (env.slots.env, env.slots.default) == ("N", 2)
    args = build(with_slots("ollama", {"source": "args", "props": "/props"}), SOURCE)
    assert (args.slots.props, args.slots.default) == ("/props", 1)
