"""What paired members served a short while ago and do not now, and this node's own engines
that PAIR is bringing back after a crash.

A member that restarts, or whose engine restarts, drops out of the routing table for a few
seconds; a request for a model only it has would get 404 "not found", which a client takes as
final. The table remembers what each member's engine listed (``AWAY_FOR_S``) so the door can say
503 instead, naming the member, and the client tries again. A member that is unpaired, or an
engine that comes back listing other models, is forgotten at once. This node's own engine is
away only while its crash restart is due or under way (``local_away``): stopped on purpose, or
given up on, its models are not found.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import msgspec

from backend.protocol.proxy import AwayModels, RouteTarget

AWAY_FOR_S = 600.0


def local_away(returning: Mapping[str, Sequence[str]], node_id: str, name: str) -> list[AwayModels]:
    """This node's engines coming back after a crash (engine -> its last listed models)."""
    return [
        AwayModels(node_id=node_id, name=name, engine=engine, models=list(models))
        for engine, models in sorted(returning.items())
        if models
    ]


class _Served(msgspec.Struct, frozen=True):
    name: str
    models: list[str]
    at: float


class AwayMemory:
    """The last models each member's engine listed, by (member, engine)."""

    def __init__(self, keep_s: float = AWAY_FOR_S) -> None:
        self._keep_s = keep_s
        self._served: dict[tuple[str, str], _Served] = {}

    def update(
        self,
        engines: Mapping[str, Sequence[RouteTarget]],
        members: Collection[str],
        now: float,
    ) -> list[AwayModels]:
        """Remember the peers in ``engines`` (the table being built); what members of
        ``members`` served within the last ``keep_s`` seconds and do not serve now."""
        present: set[tuple[str, str]] = set()
        for engine, targets in engines.items():
            for target in targets:
                if target.kind == "peer":
                    key = (target.node_id, engine)
                    present.add(key)
                    self._served[key] = _Served(target.name, list(target.models), now)
        away: list[AwayModels] = []
        for key, served in list(self._served.items()):
            node_id, engine = key
            if node_id not in members or now - served.at > self._keep_s:
                del self._served[key]
            elif key not in present and served.models:
                away.append(
                    AwayModels(
                        node_id=node_id, name=served.name, engine=engine, models=served.models
                    )
                )
        return sorted(away, key=lambda a: (a.engine, a.node_id))
