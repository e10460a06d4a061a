"""Which conversation a request belongs to, pinning it to a slot, and reading idle slots."""

from __future__ import annotations

import json

import pytest

from backend.workers.proxy.routing.candidates import (
    AFFINITY_CREDIT,
    NodeLoad,
    Reservations,
    least_loaded,
    with_snapshot,
)
from backend.workers.proxy.routing.choice import Affinity
from backend.workers.proxy.scheduler.engine_access import idle_slots
from backend.workers.proxy.scheduler.rules import SlotSample
from backend.workers.proxy.scheduler.sessions import SESSION_HEADER, pin_slot, session_of


def _body(**fields: object) -> bytes:
    return json.dumps({"model": "tiny", **fields}).encode()


def _chat(*users: str, system: str = "be brief") -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}]
    for index, text in enumerate(users):
        if index:
            messages.append({"role": "assistant", "content": "ok"})
        messages.append({"role": "user", "content": text})
    return messages


def test_the_next_turn_of_a_chat_is_the_same_session_and_another_chat_is_not() -> None:
    first = session_of({}, _body(messages=_chat("plan a walk")))
    later = session_of({}, _body(messages=_chat("plan a walk", "and then?", "more")))
    other = session_of({}, _body(messages=_chat("write a poem")))
    other_system = session_of({}, _body(messages=_chat("plan a walk", system="be long")))
    assert first is not None and first == later
    assert len({first, other, other_system}) == 3


def test_the_opening_is_the_first_system_and_first_user_message_wherever_they_stand() -> None:
    plain = session_of({}, _body(messages=_chat("plan a walk")))
    user_first = [
        {"role": "user", "content": "plan a walk"},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "and then?"},
        {"role": "system", "content": "be long"},
    ]
    assert session_of({}, _body(messages=user_first)) == plain
    # Without a system message the opening is the first user message alone.
    no_system = [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "x"}]
    only_user = session_of({}, _body(messages=no_system))
    assert only_user is not None and only_user != session_of(
        {}, _body(messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "x"}])
    )
    assert session_of({}, _body(messages=[{"role": "assistant", "content": "hi"}])) is None


def test_the_clients_own_key_wins_header_first_then_user() -> None:
    body = _body(messages=_chat("hi"), user="alice")
    assert session_of({}, body) == "u:alice"
    assert session_of({SESSION_HEADER: " chat-42 "}, body) == "k:chat-42"
    assert session_of({}, _body(messages=_chat("hi"), user="  ")) != "u:"


def test_a_bare_prompt_is_known_by_its_opening_and_nothing_at_all_is_keyless() -> None:
    opening = "x" * 600
    assert session_of({}, _body(prompt=opening)) == session_of({}, _body(prompt=opening + "more"))
    assert session_of({}, _body(prompt="a")) != session_of({}, _body(prompt="b"))
    assert session_of({}, _body()) is None
    assert session_of({}, b"not json") is None
    assert session_of({}, _body(messages=[])) is None


def test_sessions_are_per_model() -> None:
    messages = _chat("same words")
    one = session_of({}, json.dumps({"model": "a", "messages": messages}).encode())
    two = session_of({}, json.dumps({"model": "b", "messages": messages}).encode())
    assert one != two


def test_pinning_sets_the_slot_field_and_leaves_anything_else_alone() -> None:
    body = _body(messages=_chat("hi"), id_slot=3, stream=True)
    pinned = json.loads(pin_slot(body, "id_slot", 1))
    assert pinned["id_slot"] == 1 and pinned["stream"] is True
    assert pinned["messages"] == _chat("hi")
    assert pin_slot(b"[1, 2]", "id_slot", 0) == b"[1, 2]"
    assert pin_slot(b"{broken", "id_slot", 0) == b"{broken"


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "tiny", "messages": [{"role": "user", "content": "{}"}]}',
        b'{"model":"tiny"}\n',
        b"{ }",
        b'{"model": "tiny", "options": {"id_slot": 5}}',  # named, nested: rewritten whole
        b'{"model": "tiny", "id_slot": 5, "stream": true}',
    ],
)
def test_a_pinned_body_is_the_same_object_with_the_slot_set(body: bytes) -> None:
    pinned = pin_slot(body, "id_slot", 2)
    assert json.loads(pinned, object_pairs_hook=_no_duplicates) == {
        **json.loads(body),
        "id_slot": 2,
    }


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), f"a key twice: {keys}"
    return dict(pairs)


def test_idle_slots_are_read_from_the_slot_list_and_anything_else_is_unknown() -> None:
    rows = [
        {"id": 1, "is_processing": True},
        {"id": 0, "is_processing": False},
        {"id": 2, "is_processing": False},
    ]
    assert idle_slots(rows) == SlotSample(idle=2, ids=(0, 2))
    assert idle_slots({"slots": rows}) is None
    assert idle_slots([{"id": "0", "is_processing": False}]) is None
    assert idle_slots([{"id": True, "is_processing": False}]) is None
    assert idle_slots([{"id": 0}]) is None
    assert idle_slots([]) == SlotSample(idle=0, ids=())


def test_affinity_credits_the_node_that_served_the_chat_unless_it_is_clearly_busier() -> None:
    affinity = Affinity(capacity=2)
    affinity.served("chat", "b")
    credit = affinity.credit("chat", {"a", "b"})
    assert credit == {"b": AFFINITY_CREDIT}
    reservations = with_snapshot(Reservations(), 1, {})
    assert least_loaded(reservations, ["a", "b"], credit=credit) == "b", (
        "a tie goes to the chat's node"
    )
    busy = with_snapshot(Reservations(), 1, {"b": NodeLoad(pending=1)})
    assert least_loaded(busy, ["a", "b"], credit=credit) == "b", (
        "one more job is not clearly busier"
    )
    busier = with_snapshot(Reservations(), 1, {"b": NodeLoad(pending=2)})
    assert least_loaded(busier, ["a", "b"], credit=credit) == "a", "two more jobs is"
    assert affinity.credit("chat", {"a"}) == {}, "a node that is not a candidate gets nothing"
    assert affinity.credit(None, {"a", "b"}) == {}


def test_affinity_forgets_the_oldest_chats_first() -> None:
    affinity = Affinity(capacity=2)
    for chat, node in (("one", "a"), ("two", "b"), ("one", "c"), ("three", "d")):
        affinity.served(chat, node)
    assert affinity.node_for("two") is None
    assert (affinity.node_for("one"), affinity.node_for("three")) == ("c", "d")
