"""nginx as a pass-through, the practical limit of what a proxy in front of an engine can cost.

Not a benchmark itself: ``bench/front_door.py`` puts it between its clients and an engine, next
to the bare aiohttp pass-through and PAIR's door. Debian's ``nginx`` (or ``nginx-light``)
package; the system service is never used. Each :class:`Nginx` is an nginx of its own, started
by PID in the foreground (``daemon off``) with a generated configuration in a temp dir of its
own (pid file, error log, temp paths there; no access log): one worker, ``keepalive 32``
connections to the engine over HTTP/1.1, the answer unbuffered (``proxy_buffering off``: each
chunk of a stream leaves as it arrives, as it does through PAIR) and the small request body
read whole first, as the other paths do, so that a POST sent on a kept-alive connection the
engine had closed is sent once more on a new one, as the other paths do too (with
``proxy_request_buffering off`` nginx cannot resend it, and answers 502). Stopped by the
master's PID; the master takes its worker with it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psutil
from _common import STOP_TIMEOUT_S, free_port, stop_process

READY_TIMEOUT_S = 15.0
UPSTREAM_KEEPALIVE = 32
# Debian installs it outside a normal user's PATH.
_PLACES = ("/usr/sbin/nginx", "/usr/local/sbin/nginx", "/opt/homebrew/bin/nginx")


@dataclass(frozen=True)
class NginxSearch:
    """Where nginx is, or (``binary`` None) why it could not be used."""

    binary: Path | None
    reason: str = ""


def search_nginx() -> NginxSearch:
    """The nginx binary on PATH or in the usual sbin folders, or the reason there is none."""
    found = shutil.which("nginx") or next((p for p in _PLACES if os.access(p, os.X_OK)), None)
    if found is None:
        return NginxSearch(
            None,
            "nginx is not installed (Debian: `apt-get install nginx-light`, then "
            "`systemctl disable --now nginx`; the bench starts its own)",
        )
    return NginxSearch(Path(found))


def nginx_config(prefix: Path, port: int, upstream: str) -> str:
    """A configuration for one nginx worker on 127.0.0.1:``port`` passing everything through
    to ``upstream`` (``http://host:port``) over pooled keep-alive connections, unbuffered.
    The engine sees its own address as ``Host``, as from the other paths (Ollama, and so its
    emulator, refuses a host name it does not know).

    Every path it writes lies under ``prefix`` (whose ``temp`` folder must exist): the
    compiled-in temp paths are outside it (``/var/lib/nginx`` on Debian), where a normal user
    cannot create them.
    """
    address = urlsplit(upstream).netloc
    temp = "\n".join(
        f"    {kind}_temp_path {prefix / 'temp' / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""\
worker_processes 1;
pid {prefix / "nginx.pid"};
error_log {prefix / "error.log"} warn;

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
{temp}
    upstream engine {{
        server {address};
        keepalive {UPSTREAM_KEEPALIVE};
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host {address};
            proxy_buffering off;
            # The body (a few hundred bytes) is read whole before it is sent, as the bare
            # pass-through and PAIR do: only then can nginx send it again when a kept-alive
            # connection turns out to have been closed by the engine (llama-server closes its
            # connection after a stream without saying so). That one retry, on a POST, needs
            # non_idempotent; with one server it happens only for a cached connection.
            proxy_request_buffering on;
            proxy_next_upstream error timeout non_idempotent;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""


class Nginx:
    """An nginx of our own in front of ``upstream``, on a free loopback port, serving at
    ``url``; ``worker_pid`` is its one worker (whose CPU time the bench measures). Owns the
    master process (our child) and its temp dir; ``stop()`` ends both. ``log_path``: where its
    error log is copied when it stops."""

    def __init__(self, binary: Path, upstream: str, *, log_path: Path | None = None) -> None:
        self._log_path = log_path
        self.prefix = Path(tempfile.mkdtemp(prefix="pair-bench-nginx-"))
        # Run as root, the master hands requests to a worker under another user, which must be
        # able to reach the temp paths inside the prefix.
        self.prefix.chmod(0o755)
        (self.prefix / "temp").mkdir(mode=0o755)
        self.process: subprocess.Popen[bytes] | None = None
        try:
            self._start(binary, upstream)
        except BaseException:
            self.stop()
            raise

    def _start(self, binary: Path, upstream: str) -> None:
        for _attempt in range(3):
            port = free_port()
            config = self.prefix / "nginx.conf"
            config.write_text(nginx_config(self.prefix, port, upstream))
            argv = [str(binary), "-p", str(self.prefix), "-c", str(config)]
            argv += ["-e", str(self.prefix / "error.log"), "-g", "daemon off;"]
            with (self.prefix / "stderr.log").open("ab") as stderr:
                self.process = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
                )
            if self._wait_ready(port):
                self.url = f"http://127.0.0.1:{port}"
                self.worker_pid = self._worker()
                return
            lost_port = "Address already in use" in self.log_tail()
            stop_process(self.process)
            if not lost_port:
                break
        raise RuntimeError(f"nginx did not start:\n{self.log_tail()}")

    def _wait_ready(self, port: int) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and self.process.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                return True
            time.sleep(0.02)
        return False

    def _worker(self) -> int:
        """The master's one worker (it forks it right after binding)."""
        assert self.process is not None
        master = psutil.Process(self.process.pid)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            children = master.children()
            if children:
                return int(children[0].pid)
            time.sleep(0.02)
        raise RuntimeError("nginx started no worker")

    def log_tail(self, lines: int = 15) -> str:
        """The end of its error log and of its stderr."""
        text = ""
        for name in ("error.log", "stderr.log"):
            with contextlib.suppress(OSError):
                text += (self.prefix / name).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the master by its PID (SIGTERM: a fast shutdown; its worker goes with it), keep
        its error log, remove its temp dir. Idempotent."""
        if self.process is not None:
            stop_process(self.process)
        with contextlib.suppress(psutil.Error):
            if hasattr(self, "worker_pid"):
                psutil.Process(self.worker_pid).wait(timeout=STOP_TIMEOUT_S)
        if self._log_path is not None and (self.prefix / "error.log").exists():
            shutil.copyfile(self.prefix / "error.log", self._log_path)
        shutil.rmtree(self.prefix, ignore_errors=True)
