"""Brokers (``pair node``) started in network namespaces with discovery at its real pace.

The cluster tests' own ``start_node`` shortens discovery (a member unheard for about 6 s is
evicted), which would hide what the member link's liveness is for: here discovery keeps its
defaults (a scan every 5 s, eviction after about a minute), so a test of a dead link sees what
the member link and the relay do about it, not discovery.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.integration.cluster.test_three_nodes import Host, Node
from tests.integration.conftest import ROOT, Broker, node_argv, wait_until_serving
from tests.integration.engines.conftest import write_override

DISCOVERY_KNOBS = (
    "PAIR_DISCOVERY_SCAN_INTERVAL",
    "PAIR_DISCOVERY_TELEMETRY_INTERVAL",
    "PAIR_DISCOVERY_PROBE_INTERVAL",
    "PAIR_DISCOVERY_MDNS",
)


class NamespaceBrokers:
    """Starts brokers in namespaces under ``root`` (``start`` is shaped like the cluster tests'
    ``start_node``); ``stop_all`` stops every one it started, by PID."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[Node] = []

    def start(
        self,
        host: Host,
        name: str,
        models: str,
        *,
        override: dict[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        wait: bool = True,
    ) -> Node:
        """A broker named ``name`` on ``host`` (``override``: its Ollama's engine document;
        ``env``: variables added to its environment); ``models`` is left to ``override``'s
        engine. ``wait`` False: started, not yet serving (``wait_until_serving`` them all)."""
        data_dir = self.root / name
        if override is not None:
            write_override(data_dir, "ollama", override)
        environment = {k: v for k, v in os.environ.items() if k not in DISCOVERY_KNOBS}
        environment["PAIR_PROXY_RETRY_BACKOFF_S"] = "0.05,0.1"
        environment.update(env or {})
        argv = ["ip", "netns", "exec", str(host.namespace), *node_argv(data_dir)]
        stderr_path = self.root / f"{name}-{len(self.started)}.stderr"
        quiet = subprocess.DEVNULL
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                argv, cwd=ROOT, stdin=quiet, stdout=quiet, stderr=stderr, env=environment
            )
        node = Node(host, Broker(process, data_dir, stderr_path), data_dir, argv)
        self.started.append(node)
        if wait:
            wait_until_serving(node.broker, timeout=60)
        return node

    @staticmethod
    def wait_until_serving(*nodes: Node) -> None:
        """Block until each of ``nodes`` serves: brokers started together come up together."""
        for node in nodes:
            wait_until_serving(node.broker, timeout=60)

    def stop_all(self) -> None:
        """Stop every broker started here (SIGTERM, then SIGKILL); all are told at once, so
        their staged shutdowns overlap."""
        for node in self.started:
            if node.broker.process.poll() is None:
                node.broker.process.send_signal(signal.SIGTERM)
        for node in self.started:
            node.broker.stop()
