"""llama.cpp's model store: names, listing with details (partial and junk files skipped),
get/delete, and pulls from a local HTTP server (progress, checksums, refusals, failures and
cancellation leaving nothing behind)."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import os
import socket
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import gguf
import pytest
from aiohttp import web

from backend.components.engines import model_store
from backend.components.engines.model_store import (
    PROGRESS_INTERVAL,
    ModelStore,
    StoredModel,
    name_from_url,
    valid_name,
)
from backend.devtools.tiny_model import write_model
from backend.protocol import errors
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import ModelDetails, PullProgress
from tests.fakes import FakeClock
from tests.unit.components.local_server import served

ENGINE = EngineName("llamacpp")
SERVED_CHUNK = 64 * 1024


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real (tiny) llama model, about half a megabyte."""
    return write_model(tmp_path_factory.mktemp("model") / "tiny.gguf").read_bytes()


def _qwen(path: Path) -> Path:
    """A metadata-only GGUF of another architecture and quantization."""
    writer = gguf.GGUFWriter(path, arch="qwen2")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    writer.add_context_length(32768)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


@dataclass
class Progress:
    """Collects pull progress (and the fake time each arrived at)."""

    clock: FakeClock = field(default_factory=lambda: FakeClock(1000.0))
    events: list[PullProgress] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def __call__(self, event: PullProgress) -> None:
        self.events.append(event)
        self.times.append(self.clock.now)

    @property
    def downloading(self) -> list[PullProgress]:
        return [event for event in self.events if event.stage == "downloading"]

    @property
    def final(self) -> PullProgress:
        done = [event for event in self.events if event.done]
        assert len(done) == 1, self.events
        assert self.events[-1] is done[0]
        return done[0]


# -- names --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["a", "llama3.2:1b", "Qwen2.5-0.5B-Instruct_Q4_K_M", "x" * 128, "9", "a..b"]
)
def test_valid_names_pass(name: str) -> None:
    assert valid_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", ".hidden", "..", "a/b", "../x", "a\\b", "x" * 129, "a b", "ümlaut", "a\n", "a\x00b"],
)
def test_bad_names_are_invalid_params(name: str) -> None:
    with pytest.raises(errors.InvalidParams, match="invalid model name"):
        valid_name(name)


@pytest.mark.parametrize(
    ("url", "name"),
    [
        (
            "https://huggingface.co/q/r/resolve/main/Qwen2.5-0.5B-Instruct-Q4_K_M.gguf?download=1",
            "Qwen2.5-0.5B-Instruct-Q4_K_M",
        ),
        ("http://host/models/tiny", "tiny"),
        ("http://host/a%3Ab.GGUF", "a:b"),
        ("http://host/x.gguf#part", "x"),
    ],
)
def test_names_come_from_the_urls_last_segment(url: str, name: str) -> None:
    assert name_from_url(url) == name


@pytest.mark.parametrize(
    "url", ["http://host/", "http://host", "http://host/.gguf", "http://h/a%2F..%2Fb.gguf"]
)
def test_urls_without_a_usable_name_are_invalid_params(url: str) -> None:
    with pytest.raises(errors.InvalidParams, match="cannot make a model name"):
        name_from_url(url)


# -- listing, get, delete -----------------------------------------------------------------------


@pytest.fixture
def filled(tmp_path: Path, model_bytes: bytes) -> ModelStore:
    """A store with two models, a partial download, junk and a file that is not a model."""
    root = tmp_path / "models"
    root.mkdir()
    (root / "tiny.gguf").write_bytes(model_bytes)
    _qwen(root / "qwen:7b.gguf")
    (root / "half.gguf.part").write_bytes(model_bytes[:1000])
    (root / "junk.gguf").write_text("<html>not a model</html>")
    (root / "notes.txt").write_text("hello")
    (root / ".hidden.gguf").write_bytes(model_bytes)
    return ModelStore(root)


def test_list_shows_models_with_details_and_sizes(filled: ModelStore) -> None:
    models = filled.list()
    assert [model.name for model in models] == ["qwen:7b", "tiny"]
    qwen, tiny = models
    assert qwen == StoredModel(
        name="qwen:7b",
        path=filled.root / "qwen:7b.gguf",
        size=(filled.root / "qwen:7b.gguf").stat().st_size,
        details=ModelDetails(
            file="qwen:7b.gguf", architecture="qwen2", quantization="Q4_K_M", context_length=32768
        ),
    )
    assert tiny.size == (filled.root / "tiny.gguf").stat().st_size > 100_000
    assert tiny.details == ModelDetails(
        file="tiny.gguf", architecture="llama", quantization="F32", context_length=2048
    )


def test_list_is_sorted_by_name_not_by_file_name(tmp_path: Path) -> None:
    for name in ("a.b", "a", "a-c"):
        _qwen(tmp_path / f"{name}.gguf")
    assert [model.name for model in ModelStore(tmp_path).list()] == ["a", "a-c", "a.b"]


def test_a_missing_store_is_empty_and_not_created(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "nowhere")
    assert store.list() == []
    assert not store.root.exists()


def test_skipped_files_are_warned_about_once(
    filled: ModelStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    filled.list()
    filled.list()
    warned = [record.getMessage() for record in caplog.records]
    assert len([line for line in warned if "junk.gguf" in line]) == 1
    assert len([line for line in warned if ".hidden.gguf" in line]) == 1
    assert not [line for line in warned if "part" in line or "notes" in line]
    caplog.clear()
    (filled.root / "junk.gguf").write_text("different junk, longer than before")
    filled.list()
    assert len([r for r in caplog.records if "junk.gguf" in r.getMessage()]) == 1


def test_a_replaced_file_is_read_again(filled: ModelStore) -> None:
    assert filled.get("tiny").details.architecture == "llama"
    _qwen(filled.root / "tiny.gguf")
    assert filled.get("tiny").details.architecture == "qwen2"
    assert [model.details.architecture for model in filled.list()] == ["qwen2", "qwen2"]


def test_get_returns_the_model(filled: ModelStore) -> None:
    assert filled.get("tiny") == filled.list()[1]
    assert filled.path("tiny") == filled.root / "tiny.gguf"


def test_get_of_a_missing_model_names_what_exists(filled: ModelStore) -> None:
    with pytest.raises(errors.NotFound, match=r"'nope'.*holds qwen:7b, tiny") as caught:
        filled.get("nope")
    assert caught.value.data == {"model": "nope"}
    with pytest.raises(errors.NotFound, match="holds nothing"):
        ModelStore(filled.root / "empty").get("nope")
    with pytest.raises(errors.NotFound, match="half"):
        filled.get("half")  # a partial download is not a model


def test_get_of_junk_says_it_cannot_be_read(filled: ModelStore) -> None:
    with pytest.raises(errors.NotFound, match="'junk' cannot be read: not a GGUF file"):
        filled.get("junk")


def test_names_are_checked_before_touching_files(filled: ModelStore) -> None:
    for call in (filled.get, filled.path, filled.delete):
        with pytest.raises(errors.InvalidParams):
            call("../models/tiny")


def test_delete_removes_the_file(filled: ModelStore) -> None:
    filled.delete("tiny")
    assert not (filled.root / "tiny.gguf").exists()
    assert [model.name for model in filled.list()] == ["qwen:7b"]
    with pytest.raises(errors.NotFound, match="'tiny'"):
        filled.delete("tiny")
    with pytest.raises(errors.NotFound):
        filled.get("tiny")


# -- pulls --------------------------------------------------------------------------------------


@dataclass
class Server:
    """The download server: its base URL, the requests it saw and a gate for slow bodies."""

    url: str
    session: aiohttp.ClientSession
    hits: list[str]
    started: asyncio.Event
    release: asyncio.Event

    def at(self, file: str) -> str:
        """The URL of ``file`` on this server."""
        return f"{self.url}/{file}"

    async def pull(
        self,
        store: ModelStore,
        url: str,
        name: str = "tiny",
        *,
        sha256: str | None = None,
        progress: Progress | None = None,
    ) -> StoredModel:
        """Pull ``url`` into ``store`` as ``name`` over this server's session."""
        return await store.pull(
            self.session,
            url,
            name,
            sha256=sha256,
            progress=progress if progress is not None else Progress(),
            engine=ENGINE,
        )


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    """An empty store whose folder a pull makes."""
    return ModelStore(tmp_path / "models")


@pytest.fixture
async def server(model_bytes: bytes) -> AsyncIterator[Server]:
    hits: list[str] = []
    started, release = asyncio.Event(), asyncio.Event()

    async def body(
        request: web.Request, *, length: bool, cut: bool = False, padding: int = 0
    ) -> web.StreamResponse:
        data = model_bytes + bytes(padding)
        response = web.StreamResponse()
        if length:
            response.content_length = len(data)
        await response.prepare(request)
        if cut:
            data = data[: len(data) // 2]
        for start in range(0, len(data), SERVED_CHUNK):
            await response.write(data[start : start + SERVED_CHUNK])
        if cut:
            request.transport.close()  # type: ignore[union-attr]
            return response
        await response.write_eof()
        return response

    async def model(request: web.Request) -> web.StreamResponse:
        hits.append(request.path)
        return await body(request, length=True)

    async def big(request: web.Request) -> web.StreamResponse:
        hits.append(request.path)  # a model with 4 MiB of padding: many chunks
        return await body(request, length=True, padding=4 * 1024 * 1024)

    async def chunked(request: web.Request) -> web.StreamResponse:
        hits.append(request.path)
        return await body(request, length=False)

    async def cut(request: web.Request) -> web.StreamResponse:
        hits.append(request.path)
        return await body(request, length=True, cut=True)

    async def slow(request: web.Request) -> web.StreamResponse:
        hits.append(request.path)
        response = web.StreamResponse()
        response.content_length = len(model_bytes)
        await response.prepare(request)
        await response.write(model_bytes[:SERVED_CHUNK])
        started.set()
        await release.wait()
        return response

    async def missing(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(status=404, text="no such file")

    async def html(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="<html>log in first</html>" * 100, content_type="text/html")

    app = web.Application()
    app.router.add_get("/tiny.gguf", model)
    app.router.add_get("/big.gguf", big)
    app.router.add_get("/chunked.gguf", chunked)
    app.router.add_get("/cut.gguf", cut)
    app.router.add_get("/slow.gguf", slow)
    app.router.add_get("/missing.gguf", missing)
    app.router.add_get("/page.gguf", html)
    async with served(app) as (url, session):
        yield Server(url, session, hits, started, release)
        release.set()


def _files(root: Path) -> list[str]:
    return sorted(path.name for path in root.iterdir()) if root.exists() else []


def _clock(step: float) -> FakeClock:
    """A clock read by the store, ``step`` later on every reading."""
    return FakeClock(1000.0, step=step)


async def test_a_pull_stores_the_model_with_progress_and_checksum(
    tmp_path: Path, server: Server, model_bytes: bytes
) -> None:
    clock = _clock(1.0)  # every reading is a second later: no progress is throttled
    progress = Progress(clock)
    store = ModelStore(tmp_path / "models", clock=clock)
    checksum = hashlib.sha256(model_bytes).hexdigest().upper()  # case does not matter
    model = await server.pull(store, server.at("tiny.gguf"), sha256=checksum, progress=progress)
    assert model == store.get("tiny")
    assert model.size == len(model_bytes)
    assert model.details.architecture == "llama"
    assert (store.root / "tiny.gguf").read_bytes() == model_bytes
    assert _files(store.root) == ["tiny.gguf"]
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    assert stat.S_IMODE((store.root / "tiny.gguf").stat().st_mode) == 0o600

    steps = progress.downloading
    assert steps[0].completed == 0 and steps[-1].completed == len(model_bytes)
    assert len(steps) >= 3  # the start, at least one chunk, the end
    for step in steps:
        assert (step.engine, step.model, step.total, step.done) == (
            ENGINE,
            "tiny",
            len(model_bytes),
            False,
        )
        assert step.completed is not None
        assert step.percent == round(100 * step.completed / len(model_bytes), 1)
    assert [step.completed for step in steps] == sorted(step.completed or 0 for step in steps)
    assert progress.final == PullProgress(
        engine=ENGINE,
        model="tiny",
        stage="success",
        percent=100.0,
        completed=len(model_bytes),
        total=len(model_bytes),
        done=True,
    )


async def test_progress_is_throttled_to_ten_a_second(tmp_path: Path, server: Server) -> None:
    clock = _clock(PROGRESS_INTERVAL / 4)  # each reading of the clock, a quarter
    progress = Progress(clock)
    start = clock.now
    await server.pull(
        ModelStore(tmp_path, clock=clock), server.at("big.gguf"), "t", progress=progress
    )
    times = [
        when
        for when, event in zip(progress.times, progress.events, strict=True)
        if event.stage == "downloading"
    ]
    # The first and last steps are always sent; between them at most one per interval.
    gaps = [later - earlier for earlier, later in itertools.pairwise(times[:-1])]
    assert gaps, times
    assert min(gaps) >= PROGRESS_INTERVAL - 1e-9
    assert len(times) <= (clock.now - start) / PROGRESS_INTERVAL + 2

    still = _clock(0.0)  # time stands still: only the first and the last step
    quiet = Progress(still)
    other = ModelStore(tmp_path / "other", clock=still)
    await server.pull(other, server.at("tiny.gguf"), "t", progress=quiet)
    assert [step.percent for step in quiet.downloading] == [0.0, 100.0]


async def test_without_a_length_percent_is_not_guessed(
    tmp_path: Path, server: Server, model_bytes: bytes
) -> None:
    progress = Progress(_clock(1.0))
    store = ModelStore(tmp_path, clock=progress.clock)
    model = await server.pull(store, server.at("chunked.gguf"), progress=progress)
    assert model.size == len(model_bytes)
    assert progress.downloading
    assert all(step.percent is None and step.total is None for step in progress.downloading)
    assert progress.downloading[-1].completed == len(model_bytes)
    assert progress.final.stage == "success"


async def test_a_checksum_mismatch_keeps_nothing(
    store: ModelStore, server: Server, model_bytes: bytes
) -> None:
    progress = Progress()
    wrong = "ab" * 32
    with pytest.raises(errors.InvalidParams) as caught:
        await server.pull(store, server.at("tiny.gguf"), sha256=wrong, progress=progress)
    assert wrong in caught.value.message
    assert hashlib.sha256(model_bytes).hexdigest() in caught.value.message
    assert _files(store.root) == []
    assert progress.final.error == caught.value.message
    assert progress.final.stage == "error"


@pytest.mark.parametrize("checksum", ["abc", "g" * 64, "a" * 63, "a" * 65, " " + "a" * 63])
async def test_a_malformed_checksum_is_refused_before_downloading(
    store: ModelStore, server: Server, checksum: str
) -> None:
    progress = Progress()
    with pytest.raises(errors.InvalidParams, match="not a SHA-256"):
        await server.pull(store, server.at("tiny.gguf"), sha256=checksum, progress=progress)
    assert server.hits == []
    assert progress.events == []
    assert not store.root.exists()


async def test_an_http_error_is_unavailable_and_keeps_nothing(
    store: ModelStore, server: Server
) -> None:
    progress = Progress()
    with pytest.raises(errors.Unavailable, match="HTTP 404") as caught:
        await server.pull(store, server.at("missing.gguf"), progress=progress)
    assert _files(store.root) == []
    assert progress.final.error == caught.value.message


async def test_content_that_is_not_gguf_is_refused(store: ModelStore, server: Server) -> None:
    progress = Progress()
    with pytest.raises(errors.InvalidParams, match="not a GGUF model: not a GGUF file"):
        await server.pull(store, server.at("page.gguf"), "page", progress=progress)
    assert _files(store.root) == []
    assert progress.final.error is not None and "not a GGUF model" in progress.final.error
    assert "b'" not in progress.final.error, "the file's first bytes are no bytes literal"


async def test_a_body_cut_short_is_unavailable_and_keeps_nothing(
    store: ModelStore, server: Server
) -> None:
    progress = Progress()
    with pytest.raises(errors.Unavailable, match="cannot download tiny"):
        await server.pull(store, server.at("cut.gguf"), progress=progress)
    assert _files(store.root) == []
    assert progress.final.done and progress.final.error


async def test_a_refused_connection_is_unavailable(store: ModelStore, server: Server) -> None:
    with socket.socket() as probe:  # a port nobody listens on once this closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    progress = Progress()
    with pytest.raises(errors.Unavailable, match="cannot download"):
        await server.pull(store, f"http://127.0.0.1:{port}/tiny.gguf", progress=progress)
    assert _files(store.root) == []
    assert progress.final.error is not None


@pytest.mark.parametrize(
    "url", ["ftp://host/x.gguf", "file:///etc/passwd", "/tmp/x.gguf", "http:///x.gguf"]
)
async def test_only_http_urls_are_pulled(tmp_path: Path, server: Server, url: str) -> None:
    progress = Progress()
    with pytest.raises(errors.InvalidParams, match="http or https"):
        await server.pull(ModelStore(tmp_path), url, "x", progress=progress)
    assert progress.events == []


async def test_a_bad_name_is_refused_before_downloading(tmp_path: Path, server: Server) -> None:
    with pytest.raises(errors.InvalidParams, match="invalid model name"):
        await server.pull(ModelStore(tmp_path), server.at("tiny.gguf"), "../tiny")
    assert server.hits == []


async def test_an_existing_name_is_a_conflict(filled: ModelStore, server: Server) -> None:
    progress = Progress()
    before = (filled.root / "qwen:7b.gguf").read_bytes()
    with pytest.raises(errors.Conflict, match="already exists"):
        await server.pull(filled, server.at("tiny.gguf"), "qwen:7b", progress=progress)
    assert server.hits == []
    assert progress.events == []
    assert (filled.root / "qwen:7b.gguf").read_bytes() == before


async def test_a_stale_partial_file_is_replaced(
    tmp_path: Path, server: Server, model_bytes: bytes
) -> None:
    (tmp_path / "tiny.gguf.part").write_bytes(b"left over by a crash" * 100_000)
    (tmp_path / "tiny.gguf.part").chmod(0o644)
    checksum = hashlib.sha256(model_bytes).hexdigest()
    model = await server.pull(ModelStore(tmp_path), server.at("tiny.gguf"), sha256=checksum)
    assert model.path.read_bytes() == model_bytes
    assert _files(tmp_path) == ["tiny.gguf"]
    assert stat.S_IMODE(model.path.stat().st_mode) == 0o600


async def test_a_second_pull_of_the_same_name_conflicts_and_cancelling_cleans_up(
    store: ModelStore, server: Server, model_bytes: bytes
) -> None:
    first_progress = Progress()
    first = asyncio.create_task(
        server.pull(store, server.at("slow.gguf"), progress=first_progress), name="first pull"
    )
    await asyncio.wait_for(server.started.wait(), timeout=10)
    assert _files(store.root) == ["tiny.gguf.part"]
    part = store.root / "tiny.gguf.part"
    assert stat.S_IMODE(part.stat().st_mode) == 0o600

    second_progress = Progress()
    with pytest.raises(errors.Conflict, match="already being pulled"):
        await server.pull(store, server.at("tiny.gguf"), progress=second_progress)
    assert second_progress.events == []
    assert store.list() == []  # a download in progress is not a model

    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert _files(store.root) == []
    assert not [event for event in first_progress.events if event.done]

    # The name is free again once the cancelled pull is gone.
    again = await server.pull(store, server.at("tiny.gguf"))
    assert again.size == len(model_bytes)


async def test_pulls_of_different_names_run_side_by_side(tmp_path: Path, server: Server) -> None:
    store = ModelStore(tmp_path)
    url = server.at("tiny.gguf")
    models = await asyncio.gather(*(server.pull(store, url, name) for name in ("one", "two")))
    assert [model.name for model in models] == ["one", "two"]
    assert [model.name for model in store.list()] == ["one", "two"]


def test_a_partial_file_opens_private_where_there_is_no_fchmod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows has no ``os.fchmod``: a download still opens its partial file (its mode is
    what ``os.open`` gave it; there the private folder's ACL guards it)."""
    part = tmp_path / "models" / "m.gguf.part"
    monkeypatch.delattr(os, "fchmod")
    with model_store._open_part(tmp_path / "models", part) as handle:
        handle.write(b"GGUF")
    assert part.read_bytes() == b"GGUF"
    assert stat.S_IMODE(part.stat().st_mode) == 0o600
