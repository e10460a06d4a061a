"""Engine manifests: bundled JSON, user overrides deep-merged onto them, validated into structs.

Adding an engine is a manifest, not code. A user override file in ``<data-dir>/engines/`` pins
only what it sets; a broken override is reported and the bundled manifest is kept.

A manifest may say how to install the engine in more than one way (``methods``): the block of
the method this PAIR uses (``install_method``) replaces the sections it names.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import msgspec

from backend.core.net import is_loopback

log = logging.getLogger(__name__)

Method = Literal["GET", "POST", "DELETE", "PUT"]
StreamKind = Literal["none", "ollama-progress", "lmstudio-download"]
# ``tar`` is read by ``tarfile`` (plain, gzip, bzip2, xz); ``tar.zst`` is zstd-compressed.
ArchiveKind = Literal["tar", "tar.zst", "zip", "auto"]
InstallMethod = Literal["archive", "pip"]
INSTALL_METHODS: tuple[InstallMethod, ...] = ("archive", "pip")
# Forces the install method (tests, or a source checkout that wants release archives).
INSTALL_METHOD_ENV = "PAIR_ENGINE_INSTALL"
# What a method block may replace: how the engine is found, installed, versioned and updated.
METHOD_SECTIONS = frozenset(
    {"detect", "install", "uninstall", "version", "latest", "update", "assets"}
)
_ASSET_KEY = re.compile(r"(linux|darwin|windows)(/[a-z0-9_]+)?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The first dotted run of digits and what follows it up to white space: ``v0.5.7`` → ``0.5.7``.
DEFAULT_VERSION_PATTERN = r"(\d+(?:\.\d+)*\S*)"


class Probe(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An HTTP GET of ``http`` (a path) that must answer ``status``.

    Each request may take ``request_timeout_s``; a readiness probe keeps trying every
    ``interval_s`` for ``timeout_s`` in all (slow engines load models for minutes).
    """

    http: str
    status: int = 200
    timeout_s: float = 5.0
    interval_s: float = 1.0
    request_timeout_s: float = 2.0


class StopSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How to stop: a signal to our process group, or a command (daemon engines)."""

    signal: Literal["term", "kill"] = "term"
    grace_s: float = 5.0
    cmd: list[str] | None = None


class Runtime(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the engine runs: a process PAIR owns, or a daemon driven by commands.

    ``api_key_env``: the environment variable the engine reads an API key from; a process PAIR
    launches gets a random key there, so only PAIR (which sends it) reaches the engine.
    """

    mode: Literal["process", "command"]
    port: int
    bind: str = "127.0.0.1"
    args: list[str] = []
    env: dict[str, str] = {}
    params: dict[str, str] = {}
    start: list[list[str]] = []
    stop: StopSpec = StopSpec()
    ready: Probe
    health: Probe | None = None
    api_key_env: str | None = None


class DetectCandidate(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One place the engine's executable may be: a path, a PATH lookup, or a Python package."""

    path: str | None = None
    which: str | None = None
    python_package: str | None = None
    binary: str | None = None
    prepare: list[str] | None = None


class InstallSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Download ``url`` (checked against a pinned ``sha256``, else the checksum ``sha256_url``
    lists for its file name) and unpack or run it.

    ``{version}`` in ``url`` or ``sha256_url`` is the latest release (the manifest's ``latest``),
    ``{asset}`` this platform's file of the manifest's ``assets``. ``archive`` ``auto`` is a zip
    or a tar (zstd-compressed too) as the download's content says; ``unwrap``: an archive
    holding one folder and nothing else is unpacked from inside that folder (``llama-b4567/…``).
    """

    url: str | None = None
    sha256: str | None = None
    sha256_url: str | None = None
    archive: ArchiveKind | None = None
    unwrap: bool = False
    binary: str | None = None
    run: list[str] | None = None


class VersionSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How to learn the installed version; the first source that applies answers.

    ``http`` (a path; the JSON ``member`` holds the version) while the process PAIR started from
    the detected executable runs; else ``cmd`` (its output, stdout and stderr, searched with
    ``pattern``, whose first group is the version; ``env`` is added to its environment); else
    the version of the Python distribution ``python_package`` when the executable lies in it.
    That version is the one compared with the latest release; ``label_cmd`` (searched with
    ``label_pattern``) is what the executable says of itself, shown to people in its place when
    the two differ in form (a wheel numbered apart from the program it carries).
    """

    http: str | None = None
    member: str = "version"
    cmd: list[str] | None = None
    env: dict[str, str] = {}
    pattern: str = DEFAULT_VERSION_PATTERN
    python_package: str | None = None
    label_cmd: list[str] | None = None
    label_pattern: str = DEFAULT_VERSION_PATTERN
    timeout_s: float = 10.0


class LatestSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where the newest release is announced: a GET of ``url`` answering JSON whose ``member``
    (dotted: ``info.version``) holds it; ``pattern``'s first group strips decoration (``v``)."""

    url: str
    member: str
    pattern: str = DEFAULT_VERSION_PATTERN
    headers: dict[str, str] = {}
    timeout_s: float = 10.0


class UpdateSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How to put another ``{version}`` in place of the one PAIR installed.

    Everything that can fail before the engine is touched happens first: ``url`` is downloaded
    (checked against a pinned ``sha256``, else the checksum the ``sha256_url`` document lists
    for its file name) and unpacked beside the install dir (``archive`` and ``unwrap`` as in
    ``InstallSpec``), or ``stage`` runs (``{staging}``: a fresh folder). Then the engine is
    stopped and the unpacked folder takes the install dir's place, or ``run`` runs (with
    ``{download}`` and ``{staging}``). ``{asset}`` is this platform's file of ``assets``.
    """

    url: str | None = None
    sha256: str | None = None
    sha256_url: str | None = None
    archive: ArchiveKind | None = None
    unwrap: bool = False
    stage: list[str] | None = None
    run: list[str] | None = None


class UninstallSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Run a command or remove PAIR's own install dir; never the model store."""

    run: list[str] | None = None


class HttpAction(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An HTTP request to the running engine."""

    method: Method = "GET"
    path: str
    body: dict[str, Any] | None = None
    stream: StreamKind = "none"
    timeout_s: float = 30.0


class ResultSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Pick names out of a JSON answer: ``answer[array][*][field]`` (optionally only entries
    whose ``nonempty`` member is a non-empty list), and each model's size in bytes from its
    ``size`` member when the engine reports one."""

    array: str
    field: str
    nonempty: str | None = None
    size: str | None = None


class Action(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A model action: exactly one of ``http``, ``cmd`` or ``remove_path``."""

    http: HttpAction | None = None
    cmd: list[str] | None = None
    remove_path: str | None = None
    result: ResultSpec | None = None
    restart_after: bool = False
    timeout_s: float = 120.0


class SlotsSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where the engine's parallel request count comes from."""

    source: Literal["env", "loaded_instances", "args"]
    default: int = 1
    env: str | None = None
    flags: list[str] = []
    props: str | None = None


class ModelStoreSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Models kept by PAIR as files in ``dir`` (``{data_dir}`` is the node's data dir): PAIR
    lists, downloads and deletes them itself, and launches the engine with one of them."""

    format: Literal["gguf"]
    dir: str


class SchedulerSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the proxy's scheduler needs to know of the engine: whether it holds one model at a
    time, where it lists its slots, how a slot's cache is erased, saved to a file of the
    engine's slot folder and restored from one (``{id}``: the slot) and which request field
    names the slot."""

    single_model: bool = False
    slots_path: str | None = None
    erase_path: str | None = None
    save_path: str | None = None
    restore_path: str | None = None
    slot_field: str = "id_slot"


class Manifest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One engine, after merging overrides, the platform blocks and the install method's block.

    ``assets`` names the engine's release archive per platform (``linux/x86_64``,
    ``darwin/arm64``, ``windows/amd64``, or a bare ``linux``), ``{version}`` in it the release.
    ``download_page``: where a person gets the engine, named when PAIR cannot install it.
    """

    engine: str
    display_name: str
    manifest_version: Literal[1]
    front_door: Literal["ollama", "openai", "llamacpp"]
    detect: list[DetectCandidate] = []
    models_dir: str | None = None
    install: InstallSpec | None = None
    uninstall: UninstallSpec | None = None
    version: VersionSpec | None = None
    latest: LatestSpec | None = None
    update: UpdateSpec | None = None
    runtime: Runtime
    slots: SlotsSpec
    actions: dict[str, Action] = {}
    model_store: ModelStoreSpec | None = None
    scheduler: SchedulerSpec | None = None
    assets: dict[str, str] = {}
    download_page: str | None = None


class ManifestError(ValueError):
    """A manifest that cannot be used; the message says which file and what is wrong."""


class LoadedManifests(msgspec.Struct, frozen=True):
    """The usable manifests plus the problems met while loading overrides."""

    manifests: dict[str, Manifest]
    problems: dict[str, str]


def platform_keys(
    system_platform: str | None = None, machine: str | None = None
) -> tuple[str, str]:
    """This computer's platform block keys, most specific last: ``linux``, ``linux/x86_64``
    (``sys.platform`` and ``platform.machine()`` unless given: ``win32``, ``AMD64`` give
    ``windows``, ``windows/amd64``)."""
    system_platform = sys.platform if system_platform is None else system_platform
    machine = platform.machine() if machine is None else machine
    system = {"win32": "windows", "darwin": "darwin"}.get(system_platform, "linux")
    return system, f"{system}/{machine.lower()}"


def install_method(
    environ: Mapping[str, str] | None = None, *, frozen: bool | None = None
) -> InstallMethod:
    """How this PAIR installs engines that can be installed more than one way.

    A frozen app has no pip, so it downloads release archives into its install dir
    (``archive``); a source checkout installs Python packages into the broker's interpreter
    (``pip``). ``PAIR_ENGINE_INSTALL`` (``archive`` or ``pip``) forces one.
    """
    environ = os.environ if environ is None else environ
    forced = environ.get(INSTALL_METHOD_ENV, "").strip().lower()
    for method in INSTALL_METHODS:
        if forced == method:
            return method
    if forced:
        log.warning(
            "%s=%r is not an install method (%s); using the default",
            INSTALL_METHOD_ENV,
            forced,
            ", ".join(INSTALL_METHODS),
        )
    frozen = bool(getattr(sys, "frozen", False)) if frozen is None else frozen
    return "archive" if frozen else "pip"


def release_asset(assets: Mapping[str, str], keys: tuple[str, str] | None = None) -> str | None:
    """This platform's entry of an ``assets`` map (the ``system/machine`` key, else the bare
    ``system`` one), or None when the engine publishes nothing for it."""
    system, specific = keys or platform_keys()
    return assets.get(specific, assets.get(system))


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Objects merge key by key; arrays and scalars in ``override`` replace."""
    merged = dict(base)
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def resolve_platform(
    raw: Mapping[str, Any],
    source: str,
    method: InstallMethod | None = None,
    keys: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The document with the blocks of this platform (``keys`` as ``platform_keys`` gives them
    unless given) merged in, then the sections of the install method's block
    (``install_method()`` unless given) in place of the document's; without ``platforms`` and
    ``methods``."""
    document = {key: value for key, value in raw.items() if key != "platforms"}
    blocks = raw.get("platforms") or {}
    if not isinstance(blocks, Mapping):
        raise ManifestError(f"{source}: 'platforms' must be an object")
    for key in keys or platform_keys():
        if isinstance(blocks.get(key), Mapping):
            document = deep_merge(document, blocks[key])
    methods = _method_blocks(document.pop("methods", None), source)
    chosen = methods.get(method or install_method())
    return {**document, **chosen} if chosen else document


def _method_blocks(blocks: Any, source: str) -> dict[str, Mapping[str, Any]]:
    if blocks is None:
        return {}
    if not isinstance(blocks, Mapping):
        raise ManifestError(f"{source}: 'methods' must be an object")
    for name, block in blocks.items():
        if name not in INSTALL_METHODS:
            raise ManifestError(
                f"{source}: methods.{name} is not an install method (known: "
                f"{', '.join(INSTALL_METHODS)})"
            )
        if not isinstance(block, Mapping):
            raise ManifestError(f"{source}: methods.{name} must be an object")
        extra = sorted(set(block) - METHOD_SECTIONS)
        if extra:
            raise ManifestError(
                f"{source}: methods.{name} may set only {', '.join(sorted(METHOD_SECTIONS))}, "
                f"not {', '.join(extra)}"
            )
    return dict(blocks)


def merge_override(
    base: Mapping[str, Any],
    override: Mapping[str, Any],
    source: str,
    method: InstallMethod | None = None,
    keys: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A user override on a bundled manifest: what the user set wins over any platform or
    install-method default."""
    return deep_merge(
        resolve_platform(base, "bundled", method, keys),
        resolve_platform(override, source, method, keys),
    )


def build(
    raw: Mapping[str, Any],
    source: str,
    method: InstallMethod | None = None,
    keys: tuple[str, str] | None = None,
) -> Manifest:
    """Apply the platform (``keys``: this computer's unless given) and install-method blocks,
    validate and check the rules JSON types cannot express."""
    document = resolve_platform(raw, source, method, keys)
    try:
        manifest = msgspec.convert(document, Manifest)
    except msgspec.ValidationError as exc:
        raise ManifestError(f"{source}: {exc}") from None
    _check_rules(manifest, source)
    return manifest


def _check_rules(manifest: Manifest, source: str) -> None:
    runtime = manifest.runtime
    if not 1 <= runtime.port <= 65535:
        raise ManifestError(f"{source}: runtime.port {runtime.port} is not a TCP port")
    if not is_loopback(runtime.bind):
        raise ManifestError(
            f"{source}: runtime.bind {runtime.bind!r} is not a loopback address; PAIR runs "
            "engines on loopback only and serves other computers through its own front door"
        )
    if runtime.mode == "command" and not runtime.start:
        raise ManifestError(f"{source}: a command-mode runtime needs 'start' commands")
    _check_slots(manifest.slots, source)
    _check_versions(manifest, source)
    _check_release(manifest, source)
    _check_store(manifest, source)
    for name, action in manifest.actions.items():
        kinds = [action.http is not None, action.cmd is not None, action.remove_path is not None]
        if sum(kinds) != 1:
            raise ManifestError(
                f"{source}: action {name!r} needs exactly one of http, cmd, remove_path"
            )


def _check_slots(slots: SlotsSpec, source: str) -> None:
    """The ``slots`` block's rules its types cannot express (msgspec already refused unknown
    keys and wrong types, naming the field)."""
    if slots.default < 1:
        raise ManifestError(f"{source}: slots.default must be at least 1; got {slots.default}")
    if slots.source == "env" and not (slots.env and _ENV_NAME.fullmatch(slots.env)):
        raise ManifestError(
            f"{source}: slots.source 'env' needs slots.env, the name of the environment "
            f"variable that holds the count; got {slots.env!r}"
        )
    if slots.source == "args":
        if not slots.flags and slots.props is None:
            raise ManifestError(
                f"{source}: slots.source 'args' needs slots.flags (the flags that take the "
                "count) or slots.props (a path whose JSON answer has total_slots)"
            )
        if any(not flag.strip() for flag in slots.flags):
            raise ManifestError(f"{source}: slots.flags must not hold an empty flag")
    if slots.props is not None and not slots.props.startswith("/"):
        raise ManifestError(f"{source}: slots.props must be a path starting with /")


def _check_store(manifest: Manifest, source: str) -> None:
    store, scheduler = manifest.model_store, manifest.scheduler
    if store is not None:
        if not store.dir.strip():
            raise ManifestError(f"{source}: model_store.dir must name a folder")
        if manifest.runtime.mode != "process":
            raise ManifestError(
                f"{source}: a model_store needs a process runtime (PAIR launches the engine "
                "with the model)"
            )
    if scheduler is None:
        return
    slot_paths = {
        "slots_path": scheduler.slots_path,
        "erase_path": scheduler.erase_path,
        "save_path": scheduler.save_path,
        "restore_path": scheduler.restore_path,
    }
    for name, path in slot_paths.items():
        if path is not None and not path.startswith("/"):
            raise ManifestError(f"{source}: scheduler.{name} must be a path starting with /")
        if path is not None and name != "slots_path" and "{id}" not in path:
            raise ManifestError(f"{source}: scheduler.{name} needs {{id}} for the slot")
    if (scheduler.save_path is None) != (scheduler.restore_path is None):
        raise ManifestError(f"{source}: scheduler.save_path and restore_path go together")
    if not scheduler.slot_field:
        raise ManifestError(f"{source}: scheduler.slot_field must not be empty")


def _check_versions(manifest: Manifest, source: str) -> None:
    version, latest, update = manifest.version, manifest.latest, manifest.update
    if version is not None:
        if version.http is None and version.cmd is None and version.python_package is None:
            raise ManifestError(f"{source}: version needs http, cmd or python_package")
        _check_pattern(version.pattern, f"{source}: version.pattern")
        _check_pattern(version.label_pattern, f"{source}: version.label_pattern")
    if latest is not None:
        _check_pattern(latest.pattern, f"{source}: latest.pattern")
    if update is None:
        return
    if update.url is None and update.run is None:
        raise ManifestError(f"{source}: update needs a url (with an archive) or a run command")
    if update.url is not None and update.archive is None and update.run is None:
        raise ManifestError(f"{source}: update.url needs an archive to unpack or a run command")
    if update.archive is not None and update.run is not None:
        raise ManifestError(f"{source}: update unpacks an archive or runs a command, not both")
    if update.stage is not None and update.run is None:
        raise ManifestError(f"{source}: update.stage needs a run command to finish the update")
    if update.archive is not None and update.url is None:
        raise ManifestError(f"{source}: update.archive needs a url to download")
    if latest is None:
        raise ManifestError(f"{source}: an update needs 'latest' to say which version to get")


def _check_release(manifest: Manifest, source: str) -> None:
    for key, name in manifest.assets.items():
        if not _ASSET_KEY.fullmatch(key):
            raise ManifestError(
                f"{source}: assets key {key!r} is not a platform (linux, darwin or windows, "
                "optionally with the machine: linux/x86_64, darwin/arm64, windows/amd64)"
            )
        if not name.strip() or "/" in name or "\\" in name:
            raise ManifestError(f"{source}: assets[{key!r}] must be a file name")
    install, update = manifest.install, manifest.update
    sections = {"install": install, "update": update}
    for section, spec in sections.items():
        if spec is None:
            continue
        if spec.unwrap and spec.archive is None:
            raise ManifestError(f"{source}: {section}.unwrap needs an archive to unpack")
        if spec.sha256_url is not None and spec.url is None:
            raise ManifestError(f"{source}: {section}.sha256_url needs a url to download")
        if "{asset}" in (spec.url or "") and not manifest.assets:
            raise ManifestError(
                f"{source}: {section}.url uses {{asset}}, so the manifest needs 'assets' "
                "naming the file of each platform"
            )
    if install is not None and install.archive is not None and install.url is None:
        raise ManifestError(f"{source}: install.archive needs a url to download")
    if install is not None and manifest.latest is None:
        templates = [install.url or "", install.sha256_url or ""]
        if "{asset}" in templates[0]:
            templates.extend(manifest.assets.values())
        if any("{version}" in text for text in templates):
            raise ManifestError(
                f"{source}: install uses {{version}}, so the manifest needs 'latest' to say "
                "which version to install"
            )


def _check_pattern(pattern: str, where: str) -> None:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ManifestError(f"{where} is not a regular expression ({exc})") from None
    if compiled.groups < 1:
        raise ManifestError(f"{where} needs a group that captures the version")


def bundled_documents() -> dict[str, dict[str, Any]]:
    """The manifests shipped with PAIR, by engine name."""
    folder = resources.files(__package__) / "manifests"
    documents = {}
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if entry.name.endswith(".json"):
            document = json.loads(entry.read_text(encoding="utf-8"))
            documents[document["engine"]] = document
    return documents


def load_all(override_dir: Path) -> LoadedManifests:
    """Bundled manifests with the user's overrides; a bad override keeps the bundled manifest."""
    manifests: dict[str, Manifest] = {}
    problems: dict[str, str] = {}
    bundled = bundled_documents()
    for name, document in bundled.items():
        manifests[name] = build(document, f"bundled {name}.json")
    for path in sorted(override_dir.glob("*.json")) if override_dir.is_dir() else []:
        name = path.stem
        try:
            override = read_override(path)
            base = bundled.get(name, {})
            manifests[name] = build(merge_override(base, override, str(path)), str(path))
        except ManifestError as exc:
            problems[name] = str(exc)
    return LoadedManifests(manifests, problems)


def read_override(path: Path) -> dict[str, Any]:
    """One override file as a JSON object, or a ManifestError saying why not."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ManifestError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(document, dict):
        raise ManifestError(f"{path}: the top level must be an object")
    return document
