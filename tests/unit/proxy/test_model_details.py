"""Every engine's models on every list, each once, and /api/show for any engine's model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from backend.devtools import tiny_model
from backend.protocol.proxy import RouteTarget, TargetKind
from backend.workers.proxy.doors.details import human_number, quantization_from_ftype
from backend.workers.proxy.doors.engine_models import forget_details
from backend.workers.proxy.routing.candidates import RELAY_PREFIX
from tests.unit.proxy.listing_harness import Harness, get_json, running_harness, tag

TOOLS_TEMPLATE = "{% if tools %}{{ tools | tojson }}{% endif %}{{ messages }}"
QWEN_META = {
    "n_params": 1_543_714_304,
    "size": 986_000_000,
    "n_ctx_train": 32768,
    "n_ctx": 4096,
    "ftype": "Q4_K - Medium",
}


@dataclass
class LlamaStandIn:
    """llama-server's ``/v1/models`` and ``/props`` for one held model; counts ``/props``."""

    model: str
    meta: dict[str, Any]
    props: dict[str, Any] = field(default_factory=dict)
    props_asked: int = 0

    def app(self) -> web.Application:
        async def models(request: web.Request) -> web.Response:
            entry = {"id": self.model, "object": "model", "owned_by": "llamacpp", "meta": self.meta}
            return web.json_response({"object": "list", "data": [entry]})

        async def props(request: web.Request) -> web.Response:
            self.props_asked += 1
            return web.json_response(self.props)

        app = web.Application()
        app.router.add_get("/v1/models", models, allow_head=False)
        app.router.add_get("/props", props, allow_head=False)
        return app


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with running_harness() as running:
        yield running


@pytest.fixture(autouse=True)
def fresh_details() -> Iterator[None]:
    forget_details()
    yield
    forget_details()


def at(kind: TargetKind, url: str, node: str, models: list[str], **extra: Any) -> RouteTarget:
    return RouteTarget(node_id=node, kind=kind, base_url=url, models=models, **extra)


async def llama(harness: Harness, stand_in: LlamaStandIn) -> str:
    return await harness.serve(stand_in.app())


def test_parameter_counts_and_file_types_are_written_as_ollama_does() -> None:
    assert [human_number(n) for n in (121_920, 520_000, 7_000_000_000, 1_234_000_000)] == [
        "122K",
        "520K",
        "7B",
        "1.2B",
    ]
    assert human_number(350_500_000) == "350.5M" and human_number(999) == "999"
    assert quantization_from_ftype("all F32") == "F32"
    assert quantization_from_ftype("Q4_K - Medium") == "Q4_K_M"


async def test_tags_list_every_engine_s_models_once_in_ollama_s_shape(harness: Harness) -> None:
    ollama_url = await harness.ollama("tiny", "llama3")
    qwen = LlamaStandIn("qwen-1.5b", QWEN_META, {"chat_template": TOOLS_TEMPLATE})
    llama_url = await llama(harness, qwen)
    lmstudio_url = await harness.lmstudio("gemma-2-9b-it", "Tiny")
    peer_url, peer = await harness.stand_in(
        lambda: web.json_response({"models": [tag("gemma-2-9b-it"), tag("phi3:mini")]})
    )
    door = await harness.door_over(
        "llamacpp",
        {
            "lmstudio": [
                at("engine", lmstudio_url, "box", []),
                at("peer", peer_url, "friend", ["phi3:mini"]),
            ],
            "ollama": [at("local", ollama_url, "self", ["tiny", "llama3"])],
            # One model at a time: the rest of its store is listed too (``tiny`` is Ollama's).
            "llamacpp": [at("local", llama_url, "self", ["qwen-1.5b", "tiny"], single_model=True)],
        },
    )

    status, body = await get_json(door, "/api/tags")

    assert status == 200
    names = [entry["name"] for entry in body["models"]]
    assert names == ["tiny:latest", "llama3:latest", "qwen-1.5b", "gemma-2-9b-it", "phi3:mini"]
    qwen_entry = body["models"][2]
    assert qwen_entry["size"] == QWEN_META["size"] and len(qwen_entry["digest"]) == 64
    assert qwen_entry["details"] == {
        "parent_model": "",
        "format": "gguf",
        "family": "",
        "families": None,
        "parameter_size": "1.5B",
        "quantization_level": "Q4_K_M",
    }
    async with harness.session.get(f"{lmstudio_url}/api/v0/models") as direct:
        gemma = (await direct.json())["data"][0]
    assert body["models"][3]["details"]["family"] == gemma["arch"]
    assert body["models"][3]["details"]["quantization_level"] == gemma["quantization"]
    assert [path for path, _ in peer.seen] == [f"{RELAY_PREFIX}/lmstudio/api/tags"]


async def test_ps_lists_what_each_engine_holds(harness: Harness) -> None:
    qwen = LlamaStandIn("qwen-1.5b", QWEN_META)
    llama_url = await llama(harness, qwen)
    lmstudio_url = await harness.lmstudio("gemma-2-9b-it")
    door = await harness.door_over(
        "openai",
        {
            "llamacpp": [at("local", llama_url, "self", ["qwen-1.5b", "other"], single_model=True)],
            "lmstudio": [at("local", lmstudio_url, "self", ["gemma-2-9b-it"])],
        },
    )

    status, body = await get_json(door, "/api/ps")

    assert status == 200
    (held,) = body["models"]
    assert held["name"] == "qwen-1.5b" and held["context_length"] == 4096
    assert {"expires_at", "size_vram"} <= set(held)


async def test_v1_models_lists_a_name_two_engines_serve_once(harness: Harness) -> None:
    ollama_url = await harness.ollama("tiny")
    llama_url = await llama(harness, LlamaStandIn("tiny", {}))
    door = await harness.door_over(
        "openai",
        {
            "ollama": [at("local", ollama_url, "self", ["tiny"])],
            "llamacpp": [at("local", llama_url, "self", ["tiny"])],
        },
    )

    status, body = await get_json(door, "/v1/models")
    assert status == 200 and [model["id"] for model in body["data"]] == ["tiny:latest"]
    for asked in ("tiny", "TINY:latest"):
        status, entry = await get_json(door, f"/v1/models/{asked}")
        assert (status, entry["id"]) == (200, "tiny:latest")


async def test_a_missing_model_is_a_404_even_with_no_engine_anywhere(harness: Harness) -> None:
    for door_name in ("openai", "ollama"):
        door = await harness.door_over(door_name, {})
        status, body = await get_json(door, "/v1/models/nope")
        assert status == 404
        if door_name == "openai":
            assert body["error"]["code"] == "model_not_found"
        else:
            assert isinstance(body["error"], str)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        tiny_model.require_dev_dependencies()
    except tiny_model.MissingDevDependencyError as exc:
        pytest.skip(str(exc))
    return tiny_model.write_model(tmp_path_factory.mktemp("models") / "tiny.gguf")


async def test_show_reads_the_local_model_file_once_per_engine_instance(
    harness: Harness, tiny_gguf: Path
) -> None:
    props = {
        "model_path": str(tiny_gguf),
        "chat_template": TOOLS_TEMPLATE,
        "modalities": {"vision": True},
    }
    local = LlamaStandIn("tiny", {"n_params": 121_920, "size": 487_680, "n_ctx": 512}, props)
    remote = LlamaStandIn("far", {"n_params": 121_920}, props)
    door = await harness.door_over(
        "ollama",
        {
            "llamacpp": [
                at("local", await llama(harness, local), "self", ["tiny"]),
                at("engine", await llama(harness, remote), "box", ["far"]),
            ]
        },
    )

    for _ in range(2):
        response = await door.post("/api/show", json={"model": "tiny"})
        assert response.status == 200
        shown = await response.json()
    assert local.props_asked == 1, "kept for the engine instance"
    assert shown["details"]["family"] == "llama"
    assert shown["details"]["parameter_size"] == "122K"
    assert shown["details"]["quantization_level"] == "F32"
    assert shown["model_info"]["general.architecture"] == "llama"
    assert shown["model_info"]["llama.context_length"] == 2048
    assert shown["model_info"]["general.parameter_count"] == 121_920
    assert shown["capabilities"] == ["completion", "vision", "tools"]
    assert shown["template"] == TOOLS_TEMPLATE and shown["modified_at"] != "1970-01-01T00:00:00Z"

    # A file named by an engine on another machine is not this machine's to read.
    far = await (await door.post("/api/show", json={"model": "far"})).json()
    assert far["details"]["family"] == "" and far["details"]["parameter_size"] == "122K"


async def test_show_answers_for_lm_studio_and_forwards_to_ollama_and_peers(
    harness: Harness,
) -> None:
    ollama_url = await harness.ollama("llama3")
    lmstudio_url = await harness.lmstudio("gemma-2-9b-it", "nomic-embed-text-v1.5")
    peer_paths: list[str] = []

    async def peer_show(request: web.Request) -> web.Response:
        peer_paths.append(request.path)
        return web.json_response({"details": {"family": "phi3"}, "from": "peer"})

    peer_app = web.Application()
    peer_app.router.add_post("/{tail:.*}", peer_show)
    peer_url = await harness.serve(peer_app)
    door = await harness.door_over(
        "ollama",
        {
            "ollama": [at("local", ollama_url, "self", ["llama3"])],
            "lmstudio": [
                at("local", lmstudio_url, "self", ["gemma-2-9b-it", "nomic-embed-text-v1.5"]),
                at("peer", peer_url, "friend", ["phi3:mini"]),
                at("engine", lmstudio_url, "box", ["ghost"]),
            ],
        },
    )

    async def show(model: str) -> tuple[int, Any]:
        response = await door.post("/api/show", json={"model": model})
        return response.status, await response.json()

    async with harness.session.post(f"{ollama_url}/api/show", json={"model": "llama3"}) as direct:
        assert await show("llama3") == (200, await direct.json())
    assert await show("phi3:mini") == (200, {"details": {"family": "phi3"}, "from": "peer"})
    assert peer_paths == [f"{RELAY_PREFIX}/lmstudio/api/show"]
    status, gemma = await show("gemma-2-9b-it")
    assert status == 200 and gemma["capabilities"][0] == "completion"
    assert gemma["model_info"]["general.architecture"] == gemma["details"]["family"] != ""
    status, embedder = await show("nomic-embed-text-v1.5")
    assert (status, embedder["capabilities"]) == (200, ["embedding"])
    assert await show("ghost") == (404, {"error": "model 'ghost' not found"})
