"""A numbered stream's listeners in the broker hear of every event, subscribers or none."""

from __future__ import annotations

from backend.core.rpc import ClientHub, NumberedStream
from backend.protocol import methods
from backend.protocol.types.broker import ComponentsEvent


def test_listeners_hear_each_published_event_without_subscribers() -> None:
    stream: NumberedStream[ComponentsEvent] = NumberedStream(methods.COMPONENTS_EVENT, ClientHub())
    heard: list[int] = []
    stream.on_publish(lambda: heard.append(stream.seq))
    made: list[int] = []

    def make(seq: int) -> ComponentsEvent:
        made.append(seq)
        raise AssertionError("no subscriber: no event is made")

    stream.publish(make)
    stream.publish(make)
    assert heard == [1, 2]  # after each numbering
    assert made == []
