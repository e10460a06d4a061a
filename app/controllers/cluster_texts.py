"""What the Cluster page says about its commands: a new key's client settings, a front door's
port, a refused name and what leaving did. Plain functions."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from backend.common.hostport import url_host
from backend.protocol.errors import RpcError
from backend.protocol.types.apikeys import ApiKeyInfo
from backend.protocol.types.broker import BrokerStatus
from backend.protocol.types.cluster import (
    ClusterLeft,
    ClusterStatus,
)

NO_ADDRESS = "<this computer's address>"


@dataclass(frozen=True, slots=True, repr=False)
class NewKey:
    """A key just created: the only time its secret is known here, with where to use it."""

    info: ApiKeyInfo
    secret: str
    host: str  # where other computers reach this one
    openai_port: int | None
    ollama_port: int | None
    lan_access: bool  # whether other computers are let in right now
    llamacpp_port: int | None = None

    def __repr__(self) -> str:
        # Never print the secret, whatever logs or tracebacks show this value.
        return f"NewKey(info={self.info!r}, secret=<hidden>)"


def _port_text(port: int | None) -> str:
    return str(port) if port is not None else "<port>"


def client_settings(key: NewKey) -> str:
    """What a client on another computer sets to use this key, as shell lines (every door
    reaches every model, so the llama.cpp door is one more address for OpenAI clients)."""
    host = url_host(key.host)
    openai, ollama = _port_text(key.openai_port), _port_text(key.ollama_port)
    lines = [
        "# OpenAI clients",
        f"OPENAI_BASE_URL=http://{host}:{openai}/v1",
        f"OPENAI_API_KEY={key.secret}",
    ]
    if key.llamacpp_port is not None:
        lines += [
            "# or at llama-server's port (the llama.cpp door):",
            f"# OPENAI_BASE_URL=http://{host}:{key.llamacpp_port}/v1",
        ]
    return "\n".join(
        [
            *lines,
            "",
            "# Anthropic clients",
            f"ANTHROPIC_BASE_URL=http://{host}:{ollama}",
            f"ANTHROPIC_API_KEY={key.secret}",
            "",
            "# Ollama clients: send the header Authorization: Bearer <the key>",
            f"OLLAMA_HOST=http://{host}:{ollama}",
        ]
    )


def door_port(status: BrokerStatus | None, door: str) -> int | None:
    """The port a front door listens on (it may have moved off the configured one)."""
    if status is None:
        return None
    url = status.front_doors.get(door)
    if url is not None:
        try:
            port = urlsplit(url).port
        except ValueError:
            port = None
        if port is not None:
            return port
    configured = {
        "openai": status.ports.openai,
        "ollama": status.ports.ollama,
        "llamacpp": status.ports.llamacpp,
    }
    return configured.get(door)


def refusal(exc: RpcError) -> str:
    """A broker's refusal of a name as a sentence (``Not saved: a cluster name is …``)."""
    return f"Not saved: {exc.message.rstrip('.')}."


def left_text(left: ClusterLeft, before: ClusterStatus | None) -> str:
    """What leaving did; ``before`` (the status before leaving) names the members."""
    names = {member.node_id: member.name for member in before.members} if before else {}
    cluster = (before.cluster_name if before else "") or "the cluster"
    lines = [f"This computer left {cluster}. A new invite is the way back."]
    if left.not_told:
        missed = ", ".join(names.get(node_id, node_id[:8]) for node_id in left.not_told)
        lines.append(
            f"Not reached in time: {missed}. It may list this computer until it hears of it; "
            "remove this computer there if it does."
        )
    return " ".join(lines)
