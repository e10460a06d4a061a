"""The LM Studio emulator's model routes: ``/api/v0`` and ``/api/v1`` lists, load, unload,
download and download status, plus the fake-only endpoints the fake ``lms`` CLI drives."""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from backend.devtools.emulators.catalog import ModelSpec, is_known_family
from backend.devtools.emulators.lmstudio_http import (
    display_name,
    engine_of,
    express_json,
    publisher,
    read_body,
    rest_error,
)
from backend.devtools.emulators.lmstudio_scheduler import Instance, LoadSettings

# The fields POST /api/v1/models/load accepts; anything else is rejected (no "parallel").
LOAD_FIELDS: Final = frozenset(
    {
        "model",
        "context_length",
        "eval_batch_size",
        "flash_attention",
        "num_experts",
        "offload_kv_cache_to_gpu",
        "echo_load_config",
    }
)


def _quantization_bits(spec: ModelSpec) -> int:
    digits = "".join(ch for ch in spec.quantization if ch.isdigit())
    return int(digits[:2]) if spec.quantization.startswith(("F", "BF")) else int(digits[:1] or 4)


def _instance_config(instance: Instance) -> dict[str, Any]:
    config: dict[str, Any] = {"context_length": instance.context_length}
    if not instance.spec.is_embedding:
        config.update(
            eval_batch_size=512,
            parallel=instance.slots.capacity,
            flash_attention=True,
            num_experts=0,
            offload_kv_cache_to_gpu=True,
        )
    return config


def v1_entry(spec: ModelSpec, instances: list[Instance]) -> dict[str, Any]:
    """One ``GET /api/v1/models`` entry with its ``loaded_instances``."""
    entry: dict[str, Any] = {
        "type": "embedding" if spec.is_embedding else "llm",
        "publisher": publisher(spec),
        "key": spec.name,
        "display_name": display_name(spec),
    }
    if not spec.is_embedding:
        entry["architecture"] = spec.family
    entry.update(
        quantization={"name": spec.quantization, "bits_per_weight": _quantization_bits(spec)},
        size_bytes=spec.size,
        params_string=None if spec.is_embedding else spec.params_string,
        loaded_instances=[{"id": i.instance_id, "config": _instance_config(i)} for i in instances],
        max_context_length=spec.context_length,
        format="gguf",
    )
    if not spec.is_embedding:
        entry["capabilities"] = {
            "vision": "vision" in spec.capabilities,
            "trained_for_tool_use": "tools" in spec.capabilities,
        }
        entry["description"] = None
    return entry


def v0_entry(spec: ModelSpec, loaded: bool) -> dict[str, Any]:
    """One ``GET /api/v0/models`` entry with ``state``."""
    kind = "embeddings" if spec.is_embedding else "vlm" if "vision" in spec.capabilities else "llm"
    entry: dict[str, Any] = {
        "id": spec.name,
        "object": "model",
        "type": kind,
        "publisher": publisher(spec),
        "arch": spec.family,
        "compatibility_type": "gguf",
        "quantization": spec.quantization,
        "state": "loaded" if loaded else "not-loaded",
        "max_context_length": spec.context_length,
    }
    if "tools" in spec.capabilities:
        entry["capabilities"] = ["tool_use"]
    return entry


def _instances_of(request: web.Request, spec: ModelSpec) -> list[Instance]:
    instances = engine_of(request).scheduler.instances.values()
    return [instance for instance in instances if instance.spec.name == spec.name]


async def v1_models(request: web.Request) -> web.Response:
    """``GET /api/v1/models``."""
    catalog = engine_of(request).catalog
    return express_json({"models": [v1_entry(s, _instances_of(request, s)) for s in catalog]})


async def v0_models(request: web.Request) -> web.Response:
    """``GET /api/v0/models``."""
    catalog = engine_of(request).catalog
    data = [v0_entry(spec, bool(_instances_of(request, spec))) for spec in catalog]
    return express_json({"object": "list", "data": data})


async def v0_model(request: web.Request) -> web.Response:
    """``GET /api/v0/models/{model}``."""
    key = request.match_info["model"]
    spec = engine_of(request).catalog.find(key)
    if spec is None:
        return express_json({"error": f'Model "{key}" not found'}, 404)
    return express_json(v0_entry(spec, bool(_instances_of(request, spec))))


async def load(request: web.Request) -> web.Response:
    """``POST /api/v1/models/load``: blocks until loaded; unknown fields are rejected."""
    body = await read_body(request)
    unknown = sorted(set(body) - LOAD_FIELDS)
    if unknown:
        keys = ", ".join(f"'{key}'" for key in unknown)
        return rest_error("invalid_request", f"Unrecognized key(s) in object: {keys}", 400)
    engine = engine_of(request)
    key = str(body.get("model") or "")
    spec = engine.catalog.find(key) if key else None
    if spec is None:
        return rest_error("model_not_found", f'Model "{key}" not found', 404)
    started = engine.clock.monotonic()
    settings = LoadSettings(context_length=_int_or_none(body.get("context_length")))
    instance = await engine.scheduler.load(spec, settings)
    result: dict[str, Any] = {
        "type": "embedding" if spec.is_embedding else "llm",
        "instance_id": instance.instance_id,
        "load_time_seconds": round(engine.clock.monotonic() - started, 3),
        "status": "loaded",
    }
    if body.get("echo_load_config"):
        result["load_config"] = {
            key: value for key, value in _instance_config(instance).items() if key != "parallel"
        }
    return express_json(result)


async def unload(request: web.Request) -> web.Response:
    """``POST /api/v1/models/unload``."""
    body = await read_body(request)
    instance_id = str(body.get("instance_id") or "")
    if engine_of(request).scheduler.unload(instance_id) is None:
        message = f'No loaded model instance with identifier "{instance_id}"'
        return rest_error("model_not_found", message, 404)
    return express_json({"instance_id": instance_id})


async def download(request: web.Request) -> web.Response:
    """``POST /api/v1/models/download``: a job to poll, or ``already_downloaded``."""
    body = await read_body(request)
    model = str(body.get("model") or "")
    engine = engine_of(request)
    if not model:
        return rest_error("invalid_request", "'model' is required", 400)
    if engine.catalog.find(model) is not None:
        return express_json({"status": "already_downloaded"})
    if not is_known_family(model):
        return rest_error("model_not_found", f'Model "{model}" not found in the catalog', 404)
    job = engine.start_download(model)
    return express_json(job.as_json())


async def download_status(request: web.Request) -> web.Response:
    """``GET /api/v1/models/download/status/{job_id}``."""
    job = engine_of(request).downloads.get(request.match_info["job_id"])
    if job is None:
        return rest_error("job_not_found", "Download job not found", 404)
    return express_json(job.as_json())


async def download_statuses(request: web.Request) -> web.Response:
    """``GET /api/v1/models/download/status``: jobs grouped by status."""
    groups: dict[str, list[dict[str, Any]]] = {
        "downloading": [],
        "completed": [],
        "failed": [],
        "paused": [],
    }
    for job in engine_of(request).downloads.values():
        groups[job.status].append(job.as_json())
    return express_json(groups)


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


async def lms_load(request: web.Request) -> web.Response:
    """Emulator only: what ``lms load KEY [--parallel N] ...`` does over LM Studio's socket."""
    body = await read_body(request)
    engine = engine_of(request)
    spec = engine.catalog.find(str(body.get("model") or ""))
    if spec is None:
        return rest_error("model_not_found", f'Model "{body.get("model")}" not found', 404)
    ttl = body.get("ttl")
    settings = LoadSettings(
        context_length=_int_or_none(body.get("context_length")),
        parallel=_int_or_none(body.get("parallel")),
        identifier=str(body["identifier"]) if body.get("identifier") else None,
        ttl_seconds=float(ttl) if isinstance(ttl, int | float) else None,
    )
    instance = await engine.scheduler.load(spec, settings)
    return express_json({"identifier": instance.instance_id, "size_bytes": spec.size})


async def lms_unload(request: web.Request) -> web.Response:
    """Emulator only: ``lms unload ID`` / ``lms unload --all``."""
    body = await read_body(request)
    scheduler = engine_of(request).scheduler
    wanted = list(scheduler.instances) if body.get("all") else [str(body.get("identifier"))]
    unloaded = [ident for ident in wanted if scheduler.unload(ident) is not None]
    return express_json({"unloaded": unloaded})


async def lms_ps(request: web.Request) -> web.Response:
    """Emulator only: the instances ``lms ps --json`` lists."""
    engine = engine_of(request)
    result = []
    for instance in engine.scheduler.instances.values():
        spec = instance.spec
        result.append(
            {
                "type": "embedding" if spec.is_embedding else "llm",
                "modelKey": spec.name,
                "path": f"{publisher(spec)}/{spec.name}",
                "identifier": instance.instance_id,
                "displayName": display_name(spec),
                "sizeBytes": spec.size,
                "architecture": spec.family,
                "contextLength": instance.context_length,
                "maxContextLength": spec.context_length,
                "status": "generating" if instance.slots.busy else "idle",
                "queued": instance.slots.waiting,
                "parallel": instance.slots.capacity,
                "ttlMs": None if instance.ttl_seconds is None else int(instance.ttl_seconds * 1000),
            }
        )
    return express_json(result)
