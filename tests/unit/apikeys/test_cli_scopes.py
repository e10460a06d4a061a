"""``pair api-key create NAME --admin`` (or ``--scope admin``) is the only way to an admin key;
the list shows each key's scope and when it was last used (``never`` until then)."""

from __future__ import annotations

import msgspec
import pytest

from backend.cli.apikey_commands import format_created, format_keys
from backend.cli.main import build_parser
from backend.protocol.types.apikeys import ApiKeyCreate, ApiKeyCreated, ApiKeyId, ApiKeyInfo
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import BrokerStatus, Ports

PLAIN = ApiKeyInfo(id=ApiKeyId("1a2b3c4d"), name="laptop", prefix="pair-AbCd", created_at=100.0)
ADMIN = ApiKeyInfo(
    id=ApiKeyId("5e6f7a8b"),
    name="ops",
    prefix="pair-XyZw",
    created_at=100.0,
    last_used_at=3700.0,
    scope="admin",
)


def _scope(*args: str) -> str:
    parsed = build_parser().parse_args(["api-key", "create", "laptop", *args])
    return str(parsed.scope)


def test_a_key_is_inference_unless_admin_is_asked_for() -> None:
    assert _scope() == "inference"
    assert _scope("--admin") == "admin"
    assert _scope("--scope", "admin") == "admin"
    assert _scope("--scope", "inference") == "inference"
    for wrong in (["--scope", "root"], ["--admin", "--scope", "admin"]):
        with pytest.raises(SystemExit):
            _scope(*wrong)


def test_the_wire_asks_for_a_scope_only_when_it_is_not_the_default() -> None:
    assert msgspec.to_builtins(ApiKeyCreate(name="laptop")) == {"name": "laptop"}
    asked = msgspec.to_builtins(ApiKeyCreate(name="ops", scope="admin"))
    assert asked == {"name": "ops", "scope": "admin"}


def test_the_list_shows_scope_and_last_use() -> None:
    header, plain, admin = format_keys([PLAIN, ADMIN], now=3700.0 + 120).splitlines()
    assert "SCOPE" in header and "LAST USED" in header
    assert plain.split()[3:] == ["inference", "1h", "ago", "never"]
    assert admin.split()[3:] == ["admin", "1h", "ago", "2m", "ago"]


def test_creating_says_what_the_key_may_do() -> None:
    ports = Ports(node=14320, ollama=11434, openai=1234, llamacpp=8080)
    status = BrokerStatus(
        version="0",
        pid=1,
        started_at=0.0,
        uptime_ms=0,
        data_dir="/d",
        node_id=NodeId("n"),
        node_name="desk",
        control_address="/s",
        log_file=None,
        ports=ports,
        components=[],
        errors=[],
    )
    plain = format_created(
        ApiKeyCreated(key=PLAIN, secret="s"), status, "10.0.0.2", lan_access=True
    )
    assert "inference and model lists only" in plain and "--admin" in plain
    admin = format_created(
        ApiKeyCreated(key=ADMIN, secret="s"), status, "10.0.0.2", lan_access=True
    )
    assert "admin" in admin.splitlines()[0]
