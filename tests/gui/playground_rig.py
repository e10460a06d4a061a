"""A scripted cluster for the Playground and inference-check tests (and their render script):
the stores on a scripted broker connection, and a door on a real socket that streams answers in
the OpenAI API's shape, names the node that served each one and refuses the models it is told
to, with the door's own error body."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from app.controllers.endpoints import EndpointsController
from app.controllers.inference_check import InferenceCheckController
from app.controllers.playground import PlaygroundController
from app.stores.cluster import ClusterStore
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from backend.protocol import methods
from tests.gui.helpers import EngineEvents, FakeConnection, wait_until
from tests.support.scripted_server import ScriptedServer

SELF_ID, LAPTOP_ID = "node-desk", "node-laptop"


@dataclass
class ScriptedDoor(ScriptedServer):
    """A front door whose answers the test decides; it records the models asked for."""

    words: tuple[str, ...] = ("Packets ", "find ", "their ", "way ", "home.")
    word_delay: float = 0.0
    served_by: dict[str, str] = field(default_factory=dict)  # model → node id (else SELF_ID)
    refuse: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    received: list[str] = field(default_factory=list)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        model = str((await request.json())["model"])
        self.received.append(model)
        if model in self.refuse:
            status, body = self.refuse[model]
            return web.json_response(body, status=status)
        headers = {"X-PAIR-Served-By": self.served_by.get(model, SELF_ID), "X-PAIR-Job": "job-1"}
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **headers})
        await response.prepare(request)
        for word in self.words:
            await asyncio.sleep(self.word_delay)
            await _event(response, {"choices": [{"delta": {"content": word}}]})
        usage = {"completion_tokens": len(self.words)}
        await _event(response, {"choices": [], "usage": usage})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


async def _event(response: web.StreamResponse, record: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(record).encode() + b"\n\n")


def engine(name: str, title: str, state: str = "running") -> dict[str, Any]:
    """A raw ``EngineStatus``."""
    return {
        "engine": name, "display_name": title, "front_door": name, "mode": "process",
        "installed": True, "state": state, "port": 1, "default_port": 1,
    }  # fmt: skip


def listing(by_engine: dict[str, list[str]], loaded: dict[str, list[str]] | None = None) -> Any:
    """A raw ``EngineModels``."""
    return {
        "models": sorted({m for names in by_engine.values() for m in names}),
        "by_engine": by_engine,
        "loaded_by_engine": loaded or {},
        "slots_by_engine": {},
    }


LOCAL_ENGINES = (engine("ollama", "Ollama"), engine("llamacpp", "llama.cpp"))
LOCAL_MODELS = listing(
    {"ollama": ["llama3.2:3b", "qwen3:8b"], "llamacpp": ["gemma-3-1b"]},
    loaded={"ollama": ["qwen3:8b"]},
)
LAPTOP = {
    "node_id": LAPTOP_ID,
    "name": "laptop",
    "reachable": True,
    "engines": [engine("ollama", "Ollama"), engine("lmstudio", "LM Studio", "stopped")],
    "models": listing({"ollama": ["llama3.2:3b", "phi4:14b"], "lmstudio": ["openai/gpt-oss"]}),
}


def broker_status(door_url: str) -> dict[str, Any]:
    """A raw ``BrokerStatus`` with the door at ``door_url``."""
    return {
        "version": "0.1.0", "pid": 4242, "started_at": 1.0, "uptime_ms": 10, "data_dir": "/d",
        "node_id": SELF_ID, "node_name": "desk", "control_address": "/c", "log_file": None,
        "ports": {"node": 1, "ollama": 2, "openai": 3, "llamacpp": 4},
        "components": [], "errors": [], "front_doors": {"ollama": door_url},
    }  # fmt: skip


def cluster_status() -> dict[str, Any]:
    """A raw ``ClusterStatus`` of this node."""
    return {"node_id": SELF_ID, "fingerprint": "sha256:" + "ab" * 32, "key_protection": "file"}


@dataclass
class Rig:
    """The stores and the two controllers, on a scripted connection and a scripted door."""

    connection: FakeConnection
    door: ScriptedDoor
    engines: EnginesStore
    cluster: ClusterStore
    settings: SettingsStore
    endpoints: EndpointsController
    playground: PlaygroundController
    check: InferenceCheckController

    async def close(self) -> None:
        for controller in (self.playground, self.check):
            await controller.close()
        await self.endpoints.close()
        for store in (self.engines, self.cluster, self.settings):
            await store.close()
        await self.connection.stop()
        await self.door.stop()


async def start_rig(
    door: ScriptedDoor | None = None,
    engines: tuple[dict[str, Any], ...] = LOCAL_ENGINES,
    models: Any = LOCAL_MODELS,
    members: tuple[dict[str, Any], ...] = (LAPTOP,),
) -> Rig:
    """A ready session whose cluster is this computer and ``members``."""
    door = await (door or ScriptedDoor()).start()
    connection = FakeConnection()
    stores = (EnginesStore(connection), ClusterStore(connection), SettingsStore(connection))
    endpoints = EndpointsController(connection, stores[0], stores[2])
    rig = Rig(
        connection, door, *stores, endpoints,
        PlaygroundController(endpoints, stores[0], stores[1]),
        InferenceCheckController(endpoints, stores[0], stores[1]),
    )  # fmt: skip
    connection.script(methods.STATUS, broker_status(door.url))
    connection.script(methods.CLUSTER_SUBSCRIBE, {"seq": 1, "status": cluster_status()})
    EngineEvents(connection).script(*engines, models=models, members=members)
    connection.script(methods.SETTINGS_GET, {"values": {}, "schema": []})
    connection.become_ready()
    await wait_until(lambda: rig.engines.loaded and rig.cluster.status is not None, 5)
    await wait_until(lambda: rig.playground.door_url is not None, 5, "the door")
    return rig
