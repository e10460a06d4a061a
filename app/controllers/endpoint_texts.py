"""The front doors as the endpoints window and the Welcome dialog say them: per client API the
address a client takes, the settings its SDK needs and an example request; the doors' real URLs
with moved-port notes; and the node API's addresses for other computers. Plain functions."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from app.lan_addresses import url_host
from backend.protocol.types.broker import ServiceError
from backend.protocol.types.engines import EngineModels

PORT_TAKEN_PREFIX = "proxy:port-taken:"
MODEL_PLACEHOLDER = "<model>"
ANTHROPIC_VERSION = "2023-06-01"  # the Messages API refuses a request without this header
EXAMPLE_MAX_TOKENS = 256  # the Messages API requires max_tokens
# The openai and anthropic SDKs refuse to start without a key, even where none is checked.
ANY_KEY = "pair"
KEY_NOTE = (
    "This computer needs no API key; the openai and anthropic SDKs want one set, so any value "
    "works. Another computer uses a LAN API key (Cluster page) and this computer's address."
)


class DoorKind(msgspec.Struct, frozen=True):
    """A front door and the program whose usual port it takes, where apps look for it."""

    door: str
    usual_port_of: str


DOOR_KINDS: tuple[DoorKind, ...] = (
    DoorKind("ollama", "Ollama"),
    DoorKind("openai", "LM Studio"),
    DoorKind("llamacpp", "llama-server"),
)
_DOOR_ORDER = tuple(kind.door for kind in DOOR_KINDS)
_USUAL_PORT_OF = {kind.door: kind.usual_port_of for kind in DOOR_KINDS}


class ApiKind(msgspec.Struct, frozen=True):
    """A client API: its title, the example's path, and the doors to name for it, best first
    (every door speaks it; the one at the port its apps expect comes first)."""

    api: str
    title: str
    chat_path: str
    doors: tuple[str, ...]


API_KINDS: tuple[ApiKind, ...] = (
    ApiKind("ollama", "Ollama API", "/api/chat", ("ollama", "openai", "llamacpp")),
    ApiKind("openai", "OpenAI API", "/v1/chat/completions", ("openai", "llamacpp", "ollama")),
    # Ollama takes Anthropic clients on its own port, so guides point them at 11434.
    ApiKind("anthropic", "Anthropic API", "/v1/messages", ("ollama", "openai", "llamacpp")),
)


class Endpoint(msgspec.Struct, frozen=True):
    """One client API as shown: the address a client takes, its setting, an example request."""

    api: str
    title: str
    url: str
    client_setting: str
    model: str | None
    example: str
    client_settings: tuple[str, ...] = ()  # every line its SDK needs, the address first


class Door(msgspec.Struct, frozen=True):
    """One front door as shown: its real URL, whose usual port it is, a moved-port note."""

    door: str
    usual_port_of: str
    url: str
    moved_note: str | None


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def curl_example(kind: ApiKind, door_url: str, model: str | None) -> str:
    """A ``curl`` chat request in the API's own shape (POSIX shell quoting), a few short lines."""
    fields = [f'"model": {json.dumps(model or MODEL_PLACEHOLDER)}']
    if kind.api == "anthropic":
        fields.append(f'"max_tokens": {EXAMPLE_MAX_TOKENS}')
    fields.append('"messages": [{"role": "user", "content": "Hello!"}]')
    if kind.api == "ollama":
        fields.append('"stream": false')  # one JSON answer instead of a stream of lines
    body = "{\n" + ",\n".join(f"  {field}" for field in fields) + "\n}"
    head = [f"curl {door_url}{kind.chat_path}"]
    if kind.api != "ollama":
        head.append('  -H "Content-Type: application/json"')
    if kind.api == "anthropic":
        head.append(f'  -H "anthropic-version: {ANTHROPIC_VERSION}"')
    return " \\\n".join(head) + f" -d {_shell_quote(body)}"


def base_url(kind: ApiKind, door_url: str) -> str:
    """The address the API's clients take (OpenAI's SDKs want the ``/v1`` in it; Anthropic's
    SDK adds ``/v1/messages`` itself)."""
    return f"{door_url}/v1" if kind.api == "openai" else door_url


def client_setting(kind: ApiKind, door_url: str) -> str:
    """The usual way to point the API's clients at the door."""
    if kind.api == "ollama":
        return f"OLLAMA_HOST={door_url.removeprefix('http://')}"
    if kind.api == "anthropic":
        return f"ANTHROPIC_BASE_URL={base_url(kind, door_url)}"
    return f"OPENAI_BASE_URL={base_url(kind, door_url)}"


def client_settings(kind: ApiKind, door_url: str) -> tuple[str, ...]:
    """Every setting the API's SDK needs: the address, and a key where the SDK insists."""
    address = client_setting(kind, door_url)
    if kind.api == "openai":
        return (address, f"OPENAI_API_KEY={ANY_KEY}")
    if kind.api == "anthropic":
        return (address, f"ANTHROPIC_API_KEY={ANY_KEY}")
    return (address,)


def node_api_urls(addresses: Iterable[str], port: int) -> list[str]:
    """The node API (TLS) as other computers reach it, one URL per usable address."""
    return [f"https://{url_host(address)}:{port}" for address in addresses]


def example_model(listings: Iterable[EngineModels | None]) -> str | None:
    """A model of the cluster for the examples, whatever its engine: a loaded one first, else
    the first listed (``listings``: this computer's, then the other members')."""
    present = [listing for listing in listings if listing is not None]
    loaded = (n for m in present for names in m.loaded_by_engine.values() for n in names)
    listed = (n for m in present for names in m.by_engine.values() for n in names)
    return next(loaded, None) or next(listed, None)


def moved_notes(errors: Sequence[ServiceError]) -> dict[str, str]:
    """door → the broker's sentence, for every door that had to move to another port."""
    return {
        error.id.removeprefix(PORT_TAKEN_PREFIX): error.message
        for error in errors
        if error.id.startswith(PORT_TAKEN_PREFIX)
    }


def door_order(front_doors: Iterable[str]) -> list[str]:
    """The doors in a fixed order (Ollama, OpenAI, llama.cpp, then any other by name)."""
    last = len(_DOOR_ORDER)
    return sorted(
        front_doors, key=lambda d: (_DOOR_ORDER.index(d) if d in _DOOR_ORDER else last, d)
    )


def build_doors(front_doors: Mapping[str, str], errors: Sequence[ServiceError]) -> list[Door]:
    """The open doors in order, each with its real URL and its moved-port note."""
    notes = moved_notes(errors)
    return [
        Door(door, _USUAL_PORT_OF.get(door, door), front_doors[door], notes.get(door))
        for door in door_order(front_doors)
    ]


def build_endpoints(front_doors: Mapping[str, str], model: str | None) -> list[Endpoint]:
    """One entry per client API, naming its preferred open door (else the first open one);
    none while no door is open."""
    if not front_doors:
        return []
    fallback = door_order(front_doors)[0]
    endpoints = []
    for kind in API_KINDS:
        door = next((d for d in kind.doors if d in front_doors), fallback)
        url = front_doors[door]
        endpoints.append(
            Endpoint(
                api=kind.api,
                title=kind.title,
                url=base_url(kind, url),
                client_setting=client_setting(kind, url),
                client_settings=client_settings(kind, url),
                model=model,
                example=curl_example(kind, url, model),
            )
        )
    return endpoints
