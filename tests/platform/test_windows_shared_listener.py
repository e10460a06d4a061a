"""A listening socket handed to another process on Windows for real: the broker's side
(``SharedHandover`` in ``backend/components/proxy/handover.py``: ``socket.share`` with the
worker's PID, base64 in ``proxy:take-listener``) and the worker's rebuild
(``backend/workers/proxy/channels/shared.py``: ``socket.fromshare``) in two processes. The child
stands in for the proxy worker: it reads the call's params as they go on the wire, rebuilds the
listener, accepts one connection and answers it with its PID. And the PID a worker is started
with must be the process that rebuilds: the one the broker shares with. The flow's logic is
tested against fakes in ``tests/unit/proxy/test_listener_handover.py`` (which also rebuilds a
share within one process) and the worker's listener tests."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from typing import Any

import pytest

from backend.components.proxy.handover import DELIVER_TIMEOUT_S, SharedHandover
from backend.components.proxy.listeners import Listener, listen_tcp
from backend.protocol.proxy import Door
from backend.protocol.worker_methods import PROXY_TAKE_LISTENER
from tests.platform.support import only_on
from tests.support.child import REPO_ROOT

pytestmark = [only_on("win32", "socket.share and socket.fromshare"), pytest.mark.timeout(60)]

# The worker's end: says its PID, reads one ``proxy:take-listener`` params object from stdin and
# rebuilds it as the worker's listener channel does, says the port it holds, then serves one
# connection.
WORKER = """
import json, os, sys
print(os.getpid(), flush=True)
from backend.protocol.worker_methods import PROXY_TAKE_LISTENER
from backend.workers.proxy.channels.shared import shared_socket, system_fromshare
taken = PROXY_TAKE_LISTENER.convert_params(json.loads(sys.stdin.readline()))
listener = shared_socket(taken.shared, system_fromshare)
print(taken.listener, listener.getsockname()[1], flush=True)
connection, _ = listener.accept()
connection.sendall(str(os.getpid()).encode())
connection.close()
listener.close()
"""


class StdinWorker:
    """The running worker as the hand-over sees it: the PID it was started as (in a virtual
    environment on Windows, ``Popen.pid`` is the launcher's), the PID its interpreter says it
    has when pinged, and calls written to its stdin."""

    def __init__(self, process: subprocess.Popen[str], interpreter_pid: int) -> None:
        self.process = process
        self.interpreter_pid = interpreter_pid
        self.calls: list[str] = []

    def pid(self) -> int | None:
        return self.process.pid if self.process.poll() is None else None

    async def call(self, method: str, params: Any = None, *, timeout: float = 10.0) -> Any:
        self.calls.append(method)
        if method == "ping":
            return {"pong": True, "version": "0", "uptime_ms": 1, "pid": self.interpreter_pid}
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(params) + "\n")
        self.process.stdin.flush()
        return None


async def test_a_listener_shared_with_the_worker_is_served_by_the_worker() -> None:
    door: Door = "ollama"
    listener = Listener(door, 0, listen_tcp("127.0.0.1", 0))
    worker_process = subprocess.Popen(
        [sys.executable, "-c", WORKER],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker_process.stdout is not None
        worker = StdinWorker(worker_process, int(worker_process.stdout.readline()))
        await SharedHandover().deliver(worker, {door: listener}, None)
        assert worker.calls == ["ping", PROXY_TAKE_LISTENER.name]

        name, port = worker_process.stdout.readline().split()
        assert (name, int(port)) == (door, listener.port)
        # Ours closed: the worker's copy is a socket of its own now.
        address = listener.sock.getsockname()
        listener.sock.close()
        with socket.create_connection(address, timeout=DELIVER_TIMEOUT_S) as client:
            client.settimeout(DELIVER_TIMEOUT_S)
            answer = client.recv(64)

        assert answer == str(worker.interpreter_pid).encode(), "the worker served it"
        assert worker_process.wait(DELIVER_TIMEOUT_S) == 0
    finally:
        listener.sock.close()
        worker_process.kill()
        worker_process.wait()
        for stream in (worker_process.stdin, worker_process.stdout):
            if stream is not None:
                stream.close()
