"""Model actions declared by manifests: list, loaded, pull (with progress), load, unload, delete."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import msgspec

from backend.components.engines.commands import run_command
from backend.components.engines.exclusive import ExclusiveKind
from backend.components.engines.http import engine_error_text, request_json
from backend.components.engines.manifest import Action, HttpAction, ResultSpec
from backend.components.engines.templating import expand, expand_all, expand_json
from backend.core.plain_errors import plain_error
from backend.protocol import errors
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineActionResult, ModelDetails, PullProgress

if TYPE_CHECKING:
    from backend.components.engines.controller import EngineController

ProgressSink = Callable[[PullProgress], None]
MODEL_ACTIONS = ("pull_model", "load_model", "unload_model", "delete_model")
# The model actions that change what a running engine serves: they wait for the exclusive gate.
EXCLUSIVE_ACTIONS: dict[str, ExclusiveKind] = {
    "load_model": "load",
    "unload_model": "unload",
    "delete_model": "delete",
}
_PERCENT = re.compile(r"(\d{1,3}(?:\.\d+)?)\s*%")


def action_of(engine: EngineController, name: str) -> Action:
    """The manifest's action, or a clear error when this engine cannot do it."""
    action = engine.manifest.actions.get(name)
    if action is None:
        raise errors.InvalidParams(
            f"{engine.manifest.display_name} has no {name} action",
            {"engine": engine.name, "action": name},
        )
    return action


def check_action(engine: EngineController, name: str, model: str | None) -> Action:
    """The action, once it can run: model actions need ``model``; the engine must run."""
    action = action_of(engine, name)
    if name in MODEL_ACTIONS and not (model and model.strip()):
        raise errors.InvalidParams(f"{name} needs a model name")
    if not engine.running:
        raise errors.Unavailable(not_running(engine), {"engine": engine.name})
    return action


def not_running(engine: EngineController) -> str:
    """Why an engine cannot act now, with the command that makes it able to."""
    name = engine.manifest.display_name
    if not engine.status().installed:
        return f"{name} is not installed; install it with `pair engine install {engine.name}`"
    return f"{name} is not running; start it with `pair engine start {engine.name}`"


async def run_action(
    engine: EngineController, name: str, model: str | None, progress: ProgressSink
) -> EngineActionResult:
    """Run ``name``; model actions need ``model``; the engine must be running."""
    action = check_action(engine, name, model)
    values = engine.placeholder_values(model=model or "")
    if action.http is not None:
        return await _run_http(engine, name, action, values, model or "", progress)
    if action.cmd is not None:
        return await _run_cmd(engine, name, action, values, model or "", progress)
    return await _remove(engine, action, values)


class ModelListing(msgspec.Struct, frozen=True):
    """One listing of an engine's models: sorted names, sizes in bytes for those whose size
    the engine reported (the others are absent), and what the files of a model store say."""

    names: list[str]
    sizes: dict[str, int] = msgspec.field(default_factory=dict)
    details: dict[str, ModelDetails] = msgspec.field(default_factory=dict)


async def list_names(engine: EngineController, name: str, timeout: float) -> list[str]:
    """``list_models`` / ``loaded_models`` as names, bounded by ``timeout``."""
    return (await read_listing(engine, name, timeout)).names


async def read_listing(engine: EngineController, name: str, timeout: float) -> ModelListing:
    """``list_models`` / ``loaded_models`` with sizes, bounded by ``timeout``."""
    action = action_of(engine, name)
    if action.http is None or action.result is None:
        raise errors.InvalidParams(f"{name} of {engine.name} is not an HTTP listing")
    document = await request_json(
        engine.endpoint(), action.http.method, action.http.path, None, timeout=timeout
    )
    return pick_listing(document, action.result)


def pick_listing(document: Any, spec: ResultSpec) -> ModelListing:
    """Names and sizes from one answer (a pure function)."""
    return ModelListing(pick_names(document, spec), pick_sizes(document, spec))


def pick_names(document: Any, spec: ResultSpec) -> list[str]:
    """Names from ``document[spec.array][*][spec.field]`` (a pure function)."""
    return sorted({item[spec.field] for item in _picked_items(document, spec)})


def pick_sizes(document: Any, spec: ResultSpec) -> dict[str, int]:
    """Sizes in bytes from ``document[spec.array][*][spec.size]``; a model whose size is
    missing or not a whole number of bytes is left out (a pure function)."""
    if spec.size is None:
        return {}
    sizes: dict[str, int] = {}
    for item in _picked_items(document, spec):
        size = item.get(spec.size)
        # bool is an int to Python but never a size.
        if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
            sizes.setdefault(item[spec.field], size)
    return sizes


def _picked_items(document: Any, spec: ResultSpec) -> list[dict[str, Any]]:
    """The entries of ``document[spec.array]`` that name a model and pass ``spec.nonempty``."""
    items = document.get(spec.array) if isinstance(document, dict) else None
    picked = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get(spec.field), str):
            continue
        if spec.nonempty is not None and not item.get(spec.nonempty):
            continue
        picked.append(item)
    return picked


async def _run_http(
    engine: EngineController,
    name: str,
    action: Action,
    values: dict[str, str],
    model: str,
    progress: ProgressSink,
) -> EngineActionResult:
    http = action.http
    assert http is not None
    body = expand_json(http.body, values) if http.body is not None else None
    if http.stream == "ollama-progress":
        return await _stream_ollama_progress(engine, http, body, model, progress)
    if http.stream == "lmstudio-download":
        return await poll_lmstudio_download(engine, http, body, model, progress)
    document = await request_json(
        engine.endpoint(), http.method, http.path, body, timeout=http.timeout_s
    )
    if action.result is not None:
        return EngineActionResult(ok=True, names=pick_names(document, action.result))
    return await _done(engine, name, action, model)


async def _stream_ollama_progress(
    engine: EngineController, http: HttpAction, body: Any, model: str, progress: ProgressSink
) -> EngineActionResult:
    url = engine.base_url() + http.path
    report = _Reporter(engine.name, model, progress)
    try:
        async with asyncio.timeout(http.timeout_s):
            headers = engine.endpoint().headers
            async with engine.session.request(
                http.method, url, json=body, headers=headers
            ) as response:
                if response.status >= 400:
                    report.fail(engine_error_text(await response.text()))
                async for raw in response.content:
                    report.line(raw)
    except (aiohttp.ClientError, TimeoutError) as exc:
        reason = plain_error(exc, f"port {engine.port}")
        report.fail(f"{engine.manifest.display_name} stopped answering: {reason}")
    if not report.finished:
        report.fail("the engine ended the stream without reporting success")
    return EngineActionResult(ok=True)


class _Reporter:
    """Turns an Ollama pull stream into progress pushes with exactly one terminal push."""

    def __init__(self, engine: EngineName, model: str, sink: ProgressSink) -> None:
        self._engine, self._model, self._sink = engine, model, sink
        self.finished = False

    def line(self, raw: bytes) -> None:
        try:
            item = json.loads(raw)
        except ValueError:
            return
        if not isinstance(item, dict):
            return
        if isinstance(item.get("error"), str):
            self.fail(item["error"])
        status = str(item.get("status", ""))
        total, completed = item.get("total"), item.get("completed")
        measured = isinstance(total, int) and total > 0 and isinstance(completed, int)
        percent = round(100 * completed / total, 1) if measured else None  # type: ignore[operator]
        done = status == "success"
        self._sink(
            PullProgress(
                engine=self._engine,
                model=self._model,
                stage=status,
                percent=100.0 if done else percent,
                completed=completed if measured else None,
                total=total if measured else None,
                done=done,
            )
        )
        self.finished = self.finished or done

    def fail(self, message: str) -> None:
        self._sink(
            PullProgress(
                engine=self._engine, model=self._model, stage="error", done=True, error=message
            )
        )
        self.finished = True
        raise errors.InternalError(f"pull of {self._model} failed: {message}")


async def _run_cmd(
    engine: EngineController,
    name: str,
    action: Action,
    values: dict[str, str],
    model: str,
    progress: ProgressSink,
) -> EngineActionResult:
    assert action.cmd is not None
    result = await run_command(
        expand_all(action.cmd, values), timeout=action.timeout_s, output=engine.output
    )
    if name == "pull_model":
        for line in result.lines:
            match = _PERCENT.search(line)
            progress(
                PullProgress(
                    engine=engine.name,
                    model=model,
                    stage=line[:120],
                    percent=float(match.group(1)) if match else None,
                )
            )
    if result.code != 0:
        if name == "pull_model":
            progress(
                PullProgress(
                    engine=engine.name,
                    model=model,
                    stage="error",
                    done=True,
                    error=result.describe(),
                )
            )
        raise errors.InternalError(f"{name} failed: {result.describe()}")
    if name == "pull_model":
        progress(
            PullProgress(engine=engine.name, model=model, stage="success", percent=100.0, done=True)
        )
    return await _done(engine, name, action, model)


async def _remove(
    engine: EngineController, action: Action, values: dict[str, str]
) -> EngineActionResult:
    assert action.remove_path is not None
    target = expand(action.remove_path, values)
    await asyncio.to_thread(_delete_inside, values["models_dir"], target, values["model"])
    return await _done(engine, "delete_model", action, values["model"])


async def _done(
    engine: EngineController, name: str, action: Action, model: str
) -> EngineActionResult:
    """The action's answer once it took effect: the manifest's ``restart_after`` restarts the
    engine (one that indexes models at start, as LM Studio does). A restart that fails is
    reported as that, never as a failed action: what the action did is done."""
    if not action.restart_after:
        return EngineActionResult(ok=True, restarted=False if name == "delete_model" else None)
    try:
        await engine.restart()
    except errors.RpcError as exc:
        done = "deleted" if name == "delete_model" else f"{name} of"
        raise errors.InternalError(
            f"{done} {model}, but {engine.manifest.display_name} failed to restart: {exc.message}",
            {"engine": engine.name, "model": model, "action": name, "restarted": False},
        ) from exc
    return EngineActionResult(ok=True, restarted=True)


def _delete_inside(models_dir_text: str, target_text: str, model: str) -> None:
    """Delete ``target`` only if it lies strictly inside the engine's model store."""
    models_dir = Path(models_dir_text).resolve()
    target = Path(target_text).resolve()
    if not models_dir_text or models_dir == target or models_dir not in target.parents:
        raise errors.InvalidParams(f"refusing to delete {target}: it is not inside {models_dir}")
    if not target.exists():
        raise errors.NotFound(f"model {model!r} is not in {models_dir}")
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    else:
        target.unlink()


async def poll_lmstudio_download(
    engine: EngineController, http: HttpAction, body: Any, model: str, progress: ProgressSink
) -> EngineActionResult:
    """LM Studio downloads are jobs: start one, then poll its status until it ends."""
    job = await request_json(engine.endpoint(), http.method, http.path, body, timeout=60)
    if not isinstance(job, dict):
        raise errors.InternalError(f"unexpected download answer from LM Studio: {job!r}")
    async with asyncio.timeout(http.timeout_s):
        while True:
            status = str(job.get("status"))
            if status in ("completed", "already_downloaded"):
                progress(
                    PullProgress(
                        engine=engine.name, model=model, stage=status, percent=100.0, done=True
                    )
                )
                return EngineActionResult(ok=True)
            if status == "failed" or "job_id" not in job:
                message = f"LM Studio reports the download as {status}"
                progress(
                    PullProgress(
                        engine=engine.name, model=model, stage="error", done=True, error=message
                    )
                )
                raise errors.InternalError(f"pull of {model} failed: {message}")
            progress(_download_progress(engine.name, model, job))
            await asyncio.sleep(0.5)
            job = await request_json(
                engine.endpoint(), "GET", f"{http.path}/status/{job['job_id']}", None, timeout=30
            )


def _download_progress(engine: EngineName, model: str, job: dict[str, Any]) -> PullProgress:
    total, done = job.get("total_size_bytes"), job.get("downloaded_bytes")
    measured = isinstance(total, int) and total > 0 and isinstance(done, int)
    return PullProgress(
        engine=engine,
        model=model,
        stage=str(job.get("status")),
        percent=round(100 * done / total, 1) if measured else None,  # type: ignore[operator]
        completed=done if measured else None,
        total=total if measured else None,
    )
