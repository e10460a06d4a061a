"""While this computer's engine comes back (or a member does), every path that names one of
its models says so: 503 + Retry-After naming the node, not a final 404. A model nobody had is
404 on each of them."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from backend.protocol.proxy import AwayModels, ProxyTargets, RouteTarget
from backend.workers.proxy.doors.app import build_app
from tests.unit.proxy.test_door_app import _context

# This computer's llama-server is being brought back after a crash; an Ollama still serves.
AWAY = AwayModels(node_id="me", name="gaming-pc", engine="llamacpp", models=["tiny"])
OLLAMA = RouteTarget(
    node_id="me", kind="local", base_url="http://127.0.0.1:9", models=["x"], engine="ollama"
)


@pytest.mark.parametrize(
    ("method", "path", "body", "unknown"),
    [
        ("POST", "/api/chat", {"model": "{model}"}, 404),
        ("POST", "/api/show", {"model": "{model}"}, 404),
        ("POST", "/v1/messages/count_tokens", {"model": "{model}", "messages": []}, 404),
        # The one engine left is a dead address here: its list is what failed (502).
        ("GET", "/v1/models/{model}", None, 502),
    ],
    ids=["chat", "show", "count_tokens", "model"],
)
async def test_a_model_coming_back_is_503_on_every_path_and_an_unknown_one_404(
    method: str, path: str, body: dict[str, object] | None, unknown: int
) -> None:
    async with aiohttp.ClientSession() as session:
        context = _context("ollama", session)
        table = ProxyTargets(node_id="me", engines={"ollama": [OLLAMA]}, away=[AWAY])
        context.router.update(table)
        async with TestClient(TestServer(build_app(context))) as client:
            for model, status in (("tiny", 503), ("mistral", unknown)):
                sent = {
                    k: v.replace("{model}", model) if isinstance(v, str) else v
                    for k, v in (body or {}).items()
                }
                url = path.replace("{model}", model)
                answer = await client.request(method, url, json=sent if body else None)
                assert answer.status == status, (model, await answer.text())
                if status == 503:
                    assert answer.headers["Retry-After"] == "5"
                    assert "gaming-pc" in await answer.text()
