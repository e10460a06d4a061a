"""``pair invite`` and ``pair accept`` as a person runs them: two real brokers on loopback, the
commands as subprocesses, the PIN read from the inviter's output and typed on the other side."""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ROOT, Broker, wait_until_serving
from tests.integration.discovery.test_manual_nodes import FAST

StartBroker = Callable[..., Broker]
PIN_LINE = re.compile(rb"PIN  (\d{3}) (\d{3})")


@pytest.fixture
def no_mdns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The brokers find each other by the address given, not over the LAN; their discovery
    scans (which follow the cluster's members into the manual list) run every 0.5 s."""
    monkeypatch.setenv("PAIR_DISCOVERY_MDNS", "0")
    for key, value in FAST.items():
        monkeypatch.setenv(key, value)


def two(start_broker: StartBroker) -> tuple[Broker, Broker]:
    """Two brokers, started together (their starts overlap)."""
    a, b = start_broker(wait=False), start_broker(wait=False)
    wait_until_serving(a)
    wait_until_serving(b)
    return a, b


def pair(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "backend", *args, "--data-dir", str(data_dir)]


def run(data_dir: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """A ``pair`` command to its end; a new session, so a PIN prompt reads stdin, not a tty."""
    return subprocess.run(
        pair(data_dir, *args),
        cwd=ROOT,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
        start_new_session=True,
    )


def json_of(data_dir: Path, *args: str) -> Any:
    done = run(data_dir, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def node_port(broker: Broker) -> int:
    """The node port the test gave the broker (``node_argv``); ``pair status`` shows the
    same, as the first test checks."""
    argv = [str(arg) for arg in broker.process.args]
    return int(argv[argv.index("--node-port") + 1])


@dataclass
class Inviting:
    """A running ``pair invite`` and what it printed so far."""

    process: subprocess.Popen[bytes]
    out: bytearray = field(default_factory=bytearray)

    def wait_pin(self, timeout: float = 60.0) -> str:
        """The PIN, once the command shows it."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while (found := PIN_LINE.search(self.out)) is None:
                left = deadline - time.monotonic()
                assert left > 0 and selector.select(left), f"no PIN shown: {self.out!r}"
                chunk = os.read(self.process.stdout.fileno(), 4096)
                assert chunk, f"pair invite ended: {self.out!r} {self.stderr()}"
                self.out += chunk
        return (found[1] + found[2]).decode()

    def finish(self, timeout: float = 60.0) -> tuple[int, str, str]:
        """Its exit code, all it printed and its stderr. One that has not ended in time is
        made to print where it waits (``faulthandler``, on SIGABRT) before the test fails."""
        try:
            rest, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)
            rest, err = self.process.communicate(timeout=10)
            raise AssertionError(
                f"pair invite did not end within {timeout:g} s; it printed "
                f"{(bytes(self.out) + rest).decode()!r}, and where it waited:\n{err.decode()}"
            ) from None
        return self.process.returncode, (bytes(self.out) + rest).decode(), err.decode()

    def stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        return self.process.stderr.read().decode()


@contextmanager
def inviting(inviter: Broker, address: str) -> Iterator[Inviting]:
    """``pair invite ADDRESS`` on ``inviter``; killed by PID if the test leaves it running."""
    process = subprocess.Popen(
        pair(inviter.data_dir, "invite", address),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # SIGABRT prints every thread's stack
        preexec_fn=_ctrl_c_as_at_a_terminal,
    )
    try:
        yield Inviting(process)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


def _ctrl_c_as_at_a_terminal() -> None:
    """Ctrl+C's default, as a command typed at a terminal has it: a suite started in the
    background by a shell without job control (``cmd &`` in a script) runs with SIGINT
    ignored, and every child inherits that, so the Ctrl+C test's signal was never seen."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def other_pin(pin: str) -> str:
    """A well-formed PIN that is not ``pin``."""
    return f"{(int(pin) + 1) % 1_000_000:06d}"


def member_ids(broker: Broker) -> list[str]:
    return [member["node_id"] for member in json_of(broker.data_dir, "cluster").get("members", [])]


def open_invites(broker: Broker) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json_of(broker.data_dir, "invites")
    return listed


def test_invite_and_accept_make_one_cluster(no_mdns: None, start_broker: StartBroker) -> None:
    a, b = two(start_broker)
    join(b)
    with inviting(a, f"127.0.0.1:{node_port(b)}") as invite:
        pin = invite.wait_pin()
        assert [i["direction"] for i in open_invites(b)] == ["incoming"]
        # No --pin: the PIN is asked for, typed as it is shown (in two groups).
        accepted = run(b.data_dir, "accept", stdin=f"{pin[:3]} {pin[3:]}\n")
        assert accepted.returncode == 0, accepted.stdout + accepted.stderr
        assert "Paired with" in accepted.stdout and pin not in accepted.stdout
        code, out, err = invite.finish()
    assert code == 0, out + err
    assert "Type this PIN on" in out and "paired" in out.lower()
    a_status, b_status = json_of(a.data_dir, "status"), json_of(b.data_dir, "status")
    assert b_status["ports"]["node"] == node_port(b)
    assert member_ids(a) == [b_status["node_id"]]
    assert member_ids(b) == [a_status["node_id"]]
    assert a_status["cluster_id"] == b_status["cluster_id"] is not None
    shown = run(a.data_dir, "status").stdout
    assert f"fingerprint {a_status['fingerprint']}" in shown
    assert f"cluster     {a_status['cluster_id']}" in shown
    table = run(a.data_dir, "cluster").stdout
    assert b_status["node_id"][:8] in table and "no open invites" in table


def test_a_wrong_pin_is_reported_on_both_sides(no_mdns: None, start_broker: StartBroker) -> None:
    a, b = two(start_broker)
    join(b)
    with inviting(a, f"127.0.0.1:{node_port(b)}") as invite:
        pin = invite.wait_pin()
        accepted = run(b.data_dir, "accept", "--pin", other_pin(pin))
        assert accepted.returncode == 1, accepted.stdout + accepted.stderr
        assert "Wrong PIN" in accepted.stdout
        code, out, err = invite.finish()
    assert code == 1, out + err
    assert "Wrong PIN" in out and "shows a new one" in out
    assert member_ids(a) == [] and member_ids(b) == []
    assert open_invites(a) == [] and open_invites(b) == []


def test_a_malformed_pin_sends_nothing_and_a_decline_tells_the_inviter_nothing(
    no_mdns: None, start_broker: StartBroker
) -> None:
    a, b = two(start_broker)
    join(b)
    with inviting(a, f"127.0.0.1:{node_port(b)}") as invite:
        invite.wait_pin()
        accepted = run(b.data_dir, "accept", "--pin", "12345")
        assert accepted.returncode == 2
        assert "six digits" in accepted.stderr and "12345" not in accepted.stderr
        [still_open] = open_invites(b)
        assert still_open["state"] == "pending"
        declined = run(b.data_dir, "decline", still_open["id"][:6])
        assert declined.returncode == 0, declined.stderr
        assert "Declined" in declined.stdout
        # The inviter is not told (that would tell whoever sent it that someone is there):
        # its invite stays open until it expires or its user stops it.
        assert [i["state"] for i in open_invites(a)] == ["pending"]
        invite.process.send_signal(signal.SIGINT)
        code, out, err = invite.finish()
    assert code == 1, out + err
    assert "Canceled: the invite to" in out and "Declined" not in out
    assert open_invites(a) == []


def test_an_invite_to_a_computer_that_did_not_ask_to_join_says_what_to_do(
    no_mdns: None, start_broker: StartBroker
) -> None:
    a, b = two(start_broker)
    refused = run(a.data_dir, "invite", f"127.0.0.1:{node_port(b)}")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "Not accepting invites" in refused.stdout and "pair join" in refused.stdout
    assert open_invites(a) == [] and open_invites(b) == []
    join(b)
    assert "join window  open" in run(b.data_dir, "cluster").stdout
    closed = run(b.data_dir, "join", "--close")
    assert closed.returncode == 0 and "does not accept invites" in closed.stdout
    assert "join window" not in run(b.data_dir, "cluster").stdout


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_stopping_the_invite_cancels_it_on_both_sides(
    stop: signal.Signals, no_mdns: None, start_broker: StartBroker
) -> None:
    a, b = two(start_broker)
    join(b)
    with inviting(a, f"127.0.0.1:{node_port(b)}") as invite:
        invite.wait_pin()
        assert len(open_invites(b)) == 1
        invite.process.send_signal(stop)
        code, out, err = invite.finish()
    assert code == 1, out + err
    assert "Canceled: the invite to" in out
    assert open_invites(a) == [] and open_invites(b) == []
    refused = run(b.data_dir, "accept", "--pin", "483920")
    assert refused.returncode == 1 and "no incoming invite is open" in refused.stderr


def join(joiner: Broker) -> None:
    """``pair join`` on ``joiner``: it takes invites for the next 10 minutes."""
    opened = run(joiner.data_dir, "join")
    assert opened.returncode == 0, opened.stdout + opened.stderr
    assert "This computer accepts invites for" in opened.stdout and "pair accept" in opened.stdout


def paired(a: Broker, b: Broker) -> None:
    """B asks to join, A invites B and B types the PIN, all through the CLI."""
    join(b)
    with inviting(a, f"127.0.0.1:{node_port(b)}") as invite:
        accepted = run(b.data_dir, "accept", "--pin", invite.wait_pin())
        assert accepted.returncode == 0, accepted.stdout + accepted.stderr
        code, out, err = invite.finish()
    assert code == 0, out + err


def eventually(check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Until ``check`` passes; each check runs a ``pair`` command, which paces the loop."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "never came true"
        time.sleep(0.05)


def test_remove_takes_a_member_out_on_both_sides(no_mdns: None, start_broker: StartBroker) -> None:
    a, b = two(start_broker)
    paired(a, b)
    b_id = json_of(b.data_dir, "status")["node_id"]
    unsure = run(a.data_dir, "remove", b_id[:8])  # stdin is closed: no "yes", nothing removed
    assert unsure.returncode == 1 and "Nothing removed" in unsure.stderr
    assert member_ids(a) == [b_id]
    missing = run(a.data_dir, "remove", "no-such-computer", "--yes")
    assert missing.returncode == 1 and "`pair cluster` lists them" in missing.stderr
    b_port = node_port(b)
    # A's discovery follows its members: it adds B by address (no mDNS here).
    eventually(lambda: any(e["port"] == b_port for e in json_of(a.data_dir, "nodes")["manual"]))
    removed = run(a.data_dir, "remove", b_id[:8], "--yes")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.startswith("Removed ") and "for good" in removed.stdout
    assert member_ids(a) == []
    eventually(lambda: json_of(b.data_dir, "cluster").get("cluster_id") is None)
    assert "removed      from" in run(b.data_dir, "cluster").stdout
    # That entry goes with the member: A no longer probes B or warns about it.
    eventually(lambda: all(e["port"] != b_port for e in json_of(a.data_dir, "nodes")["manual"]))


def test_rename_reaches_the_other_member_and_leave_ends_the_cluster(
    no_mdns: None, start_broker: StartBroker
) -> None:
    a, b = two(start_broker)
    paired(a, b)
    renamed = run(a.data_dir, "cluster", "--rename", "Studio")
    assert renamed.returncode == 0 and "'Studio'" in renamed.stdout, renamed.stderr
    eventually(lambda: json_of(b.data_dir, "cluster").get("cluster_name") == "Studio")
    left = run(b.data_dir, "leave", "--yes")
    assert left.returncode == 0, left.stderr
    assert left.stdout.startswith("Left the cluster Studio") and "Told: " in left.stdout
    assert json_of(b.data_dir, "cluster").get("cluster_id") is None
    eventually(lambda: member_ids(a) == [])
    again = run(b.data_dir, "leave", "--yes")
    assert again.returncode == 1 and "in no cluster" in again.stderr
