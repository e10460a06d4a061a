"""Break the network between two hosts for real, and mend it: for tests and benchmarks.

The hosts are Linux network namespaces on a bridge (as ``test_three_nodes``'s ``hosts`` makes
them). Faults (``LinkFaults``):

- a blackhole route on B towards A: A's packets reach B and nothing comes back, as on a link
  that died one way (B's own sends to A fail locally, so B's kernel never answers A);
- a TCP-only blackhole (a policy rule on ``ipproto tcp``): B's mDNS and other UDP still reach A,
  its TCP answers do not (the asymmetric fault);
- the link down: the bridge's end of B's cable set down (B's ``eth0`` loses its carrier, its
  addresses and routes stay, as when Wi-Fi drops);
- latency and loss with ``netem``, only where the kernel has ``sch_netem``
  (``netem_unavailable`` says why not).

Every fault is recorded when it is made; ``restore`` undoes one, ``restore_all`` (a fixture's
teardown, a ``finally``) undoes the rest, in reverse order, and never raises. Where there are no
namespaces, ``LoopbackLink`` stands a ``FaultProxy`` in for the link and blackholes it there.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from tests.support.faultproxy import Fault, FaultProxy

# The policy-routing table the TCP-only blackhole uses (any number the namespace does not use).
TCP_BLACKHOLE_TABLE = "4242"
TCP_BLACKHOLE_PRIORITY = "100"
COMMAND_TIMEOUT_S = 10.0
CLONE_NEWNET = 0x40000000  # <sched.h>


@dataclass(frozen=True)
class AppliedFault:
    """One fault made on the network: what it is, and the commands that undo it."""

    description: str
    undo: tuple[tuple[str, ...], ...]


class LinkFailed(RuntimeError):
    """A fault could not be made (the command's own message says why)."""


def run_ip(*argv: str) -> None:
    """Run ``argv`` (``ip ...`` or ``tc ...``); raise ``LinkFailed`` with its stderr on failure."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        raise LinkFailed(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


class LinkFaults:
    """The faults a test made, each undone by ``restore`` or, at the latest, ``restore_all``."""

    def __init__(self) -> None:
        self._applied: list[AppliedFault] = []

    @property
    def applied(self) -> tuple[AppliedFault, ...]:
        """The faults in place now, oldest first."""
        return tuple(self._applied)

    def blackhole(self, on: str, towards: str) -> AppliedFault:
        """On namespace ``on``, drop every packet to ``towards`` (an IPv4 address)."""
        run_ip("ip", "-n", on, "route", "add", "blackhole", f"{towards}/32")
        undo = (("ip", "-n", on, "route", "del", "blackhole", f"{towards}/32"),)
        return self._record(f"blackhole route on {on} towards {towards}", undo)

    def tcp_blackhole(self, on: str, towards: str) -> AppliedFault:
        """On namespace ``on``, drop TCP to ``towards`` only (UDP, mDNS included, still goes)."""
        table = ("table", TCP_BLACKHOLE_TABLE)
        run_ip("ip", "-n", on, "route", "add", "blackhole", f"{towards}/32", *table)
        rule = ("to", f"{towards}/32", "ipproto", "tcp", "lookup", TCP_BLACKHOLE_TABLE)
        try:
            run_ip("ip", "-n", on, "rule", "add", *rule, "priority", TCP_BLACKHOLE_PRIORITY)
        except LinkFailed:
            subprocess.run(["ip", "-n", on, "route", "del", "blackhole", f"{towards}/32", *table])
            raise
        undo = (
            ("ip", "-n", on, "rule", "del", *rule, "priority", TCP_BLACKHOLE_PRIORITY),
            ("ip", "-n", on, "route", "del", "blackhole", f"{towards}/32", *table),
        )
        return self._record(f"TCP-only blackhole on {on} towards {towards}", undo)

    def link_down(self, namespace: str, device: str = "eth0") -> AppliedFault:
        """Set the bridge's end of ``namespace``'s ``device`` (a veth) down: no carrier."""
        outer = veth_peer(namespace, device)
        run_ip("ip", "link", "set", outer, "down")
        undo = (("ip", "link", "set", outer, "up"),)
        return self._record(f"link of {namespace} down ({outer})", undo)

    def netem(
        self, namespace: str, *, delay_ms: int, loss_percent: float = 0.0, device: str = "eth0"
    ) -> AppliedFault:
        """Delay (and lose) every packet ``namespace`` sends on ``device``; needs ``sch_netem``."""
        shape = ["delay", f"{delay_ms}ms"]
        if loss_percent:
            shape += ["loss", f"{loss_percent:g}%"]
        run_ip("tc", "-n", namespace, "qdisc", "add", "dev", device, "root", "netem", *shape)
        undo = (("tc", "-n", namespace, "qdisc", "del", "dev", device, "root"),)
        return self._record(f"netem {' '.join(shape)} on {namespace}", undo)

    def restore(self, fault: AppliedFault) -> None:
        """Undo ``fault`` (raises ``LinkFailed`` if an undo command fails)."""
        self._applied.remove(fault)
        for argv in fault.undo:
            run_ip(*argv)

    def restore_all(self) -> list[str]:
        """Undo every fault still in place, newest first; the failures, as messages (never
        raises: it runs in teardown, where the namespaces may already be gone)."""
        failures: list[str] = []
        while self._applied:
            try:
                self.restore(self._applied[-1])
            except (LinkFailed, OSError, subprocess.TimeoutExpired) as exc:
                failures.append(str(exc))
        return failures

    def _record(self, description: str, undo: tuple[tuple[str, ...], ...]) -> AppliedFault:
        fault = AppliedFault(description, undo)
        self._applied.append(fault)
        return fault


@contextlib.contextmanager
def link_faults() -> Iterator[LinkFaults]:
    """A ``LinkFaults`` whose faults are all undone on the way out, whatever happened."""
    faults = LinkFaults()
    try:
        yield faults
    finally:
        faults.restore_all()


def veth_peer(namespace: str, device: str = "eth0") -> str:
    """The name, in this (the root) namespace, of the other end of ``namespace``'s veth."""
    shown = subprocess.run(
        ["ip", "-n", namespace, "-o", "link", "show", device],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=True,
    ).stdout
    found = re.search(rf"\d+: {re.escape(device)}@if(\d+):", shown)
    if found is None:
        raise LinkFailed(f"{device} in {namespace} is not a veth: {shown.strip()}")
    index = found.group(1)
    listed = subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    ).stdout
    for line in listed.splitlines():
        number, _, rest = line.partition(": ")
        if number == index:
            return rest.split(":", 1)[0].split("@", 1)[0]
    raise LinkFailed(f"the peer of {device} in {namespace} (ifindex {index}) is not here")


def join_network_namespace(namespace: str) -> None:
    """Move the calling thread (only it: Linux keeps a network namespace per thread) into
    ``namespace``: the sockets it opens from then on are on that host."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open(f"/run/netns/{namespace}", "rb") as handle:
        if libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {namespace} failed")


def namespaces_unavailable() -> str | None:
    """Why network namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    probe = f"pairprobe{os.getpid() % 100000}"
    try:
        run_ip("ip", "netns", "add", probe)
    except (LinkFailed, OSError) as exc:
        return f"`ip netns add` failed: {exc}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=10)
    return None


def netem_unavailable() -> str | None:
    """Why ``netem`` cannot be used here (None: it can): tried on a throwaway namespace."""
    if os.geteuid() != 0:
        return "netem needs root"
    probe = f"pairnetem{os.getpid() % 100000}"
    try:
        run_ip("ip", "netns", "add", probe)
    except (LinkFailed, OSError) as exc:
        return f"no network namespace to try netem in: {exc}"
    try:
        run_ip("ip", "-n", probe, "link", "set", "lo", "up")
        run_ip("tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
    except (LinkFailed, OSError) as exc:
        return f"the kernel has no sch_netem (netem qdisc refused: {exc})"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=10)
    return None


class LoopbackLink:
    """Where there are no namespaces: a ``FaultProxy`` carries the link (a peer is reached at
    its address), and a dead link is a black hole there (accepted, never answered)."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.proxy = FaultProxy(upstream_host, upstream_port)

    async def start(self) -> LoopbackLink:
        """Listen (``address`` is where the peer is reached from now on)."""
        await self.proxy.start()
        return self

    @property
    def address(self) -> tuple[str, int]:
        """Where to reach the peer through this link."""
        return "127.0.0.1", self.proxy.port

    def blackhole(self) -> None:
        """New connections are never answered; open ones go silent (nothing more either way)."""
        self.proxy.set_fault(Fault.blackhole())
        for link in self.proxy.links:
            for side in (link.client, link.upstream):
                if side is not None and not side.transport.is_closing():
                    # Nothing read is nothing forwarded: both ends stay open, and silent.
                    side.transport.pause_reading()  # type: ignore[attr-defined]

    def restore(self) -> None:
        """Forward again, for connections made from now on."""
        self.proxy.set_fault(Fault.forward())

    async def aclose(self) -> None:
        """Stop listening and close every connection."""
        await self.proxy.aclose()
