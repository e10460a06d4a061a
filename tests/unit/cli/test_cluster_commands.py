"""The cluster commands without a broker: addresses and ports, PINs, invite ids by prefix, the
outcome of every state in words, the tables, and ``pair invite`` waiting on a scripted peer."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, cast, get_args

import msgspec
import pytest

from backend.cli import cluster_commands, confirm, exit_codes, join_command
from backend.cli.client_commands import format_status
from backend.cli.cluster_commands import InviteWatch
from backend.cli.cluster_format import (
    OUTCOMES,
    PIN_MESSAGE,
    WORDS,
    Target,
    Unresolved,
    big_digits,
    describe_left,
    describe_outcome,
    describe_removed,
    expires_in,
    format_cluster,
    format_invite_opened,
    format_invites,
    format_members,
    format_pin,
    normalize_pin,
    parse_target,
    resolve_invite,
    resolve_member,
    short_fingerprint,
)
from backend.cli.main import build_parser, main
from backend.protocol import methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import InviteId, NodeId
from backend.protocol.types.broker import BrokerStatus, Ports, ServiceError
from backend.protocol.types.cluster import (
    ClusterLeft,
    ClusterMember,
    ClusterStatus,
    Invite,
    InviteChanged,
    InviteDirection,
    InviteState,
    JoinWindow,
    MemberRemoved,
    MembershipChanged,
    RemovedFromCluster,
)

NOW = 1_700_000_000.0
FINGERPRINT = "sha256:" + "ab12cd34ef567890" + "0" * 48
PEER_ID = NodeId("5e1f0a2b-1111-4222-8333-944455556666")
SELF_ID = NodeId("0f3c2a9e-aaaa-4bbb-8ccc-9ddddeeeefff")


def _invite(
    invite_id: str = "a1b2c3d4" + "0" * 24,
    direction: InviteDirection = "incoming",
    state: InviteState = "pending",
    reason: str | None = None,
) -> Invite:
    return Invite(
        id=InviteId(invite_id),
        direction=direction,
        peer_node_id=PEER_ID,
        peer_name="bob-laptop",
        peer_address="192.168.1.20",
        peer_fingerprint=FINGERPRINT,
        created_at=NOW - 10,
        expires_at=NOW + 252,
        state=state,
        reason=reason,
    )


def _member(**fields: Any) -> ClusterMember:
    base: dict[str, Any] = {
        "node_id": PEER_ID,
        "name": "bob-laptop",
        "fingerprint": FINGERPRINT,
        "address": "192.168.1.20",
        "node_port": 14320,
        "added_by": SELF_ID,
        "added_at": NOW - 3600,
        "state": "offline",
    }
    return ClusterMember(**{**base, **fields})


# -- addresses ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "port", "expected"),
    [
        ("192.168.1.20", None, Target("192.168.1.20", 14320)),
        (" 192.168.1.20 ", None, Target("192.168.1.20", 14320)),
        ("192.168.1.20:9000", None, Target("192.168.1.20", 9000)),
        ("192.168.1.20", 9000, Target("192.168.1.20", 9000)),
        ("192.168.1.20:9000", 9000, Target("192.168.1.20", 9000)),
        ("100.101.102.103", None, Target("100.101.102.103", 14320)),  # a Tailscale address
        ("[::1]:9000", None, Target("::1", 9000)),
        ("[2001:db8::5]", None, Target("2001:db8::5", 14320)),
        ("2001:db8::5", None, Target("2001:db8::5", 14320)),
        ("fd7a:115c:a1e0::1", 15000, Target("fd7a:115c:a1e0::1", 15000)),
        ("fe80::1%eth0", None, Target("fe80::1%eth0", 14320)),
        ("bob-laptop.local", None, Target("bob-laptop.local", 14320)),
        ("bob-laptop.local.", None, Target("bob-laptop.local.", 14320)),
        ("bob:15000", None, Target("bob", 15000)),
        ("bob.tail1234.ts.net", None, Target("bob.tail1234.ts.net", 14320)),
    ],
)
def test_addresses_and_ports_parse(text: str, port: int | None, expected: Target) -> None:
    assert parse_target(text, port) == expected


@pytest.mark.parametrize(
    ("text", "port", "says"),
    [
        ("", None, "give the other computer's address"),
        ("999.1.1.1", None, "not a valid IPv4 address"),
        ("10.0.0", None, "not a valid IPv4 address"),
        ("::1:14320", None, "write [2001:db8::5]:14320"),
        ("[::1", None, "write an IPv6 address with a port as"),
        ("[10.0.0.5]:9000", None, "brackets are for IPv6 addresses only"),
        ("[bob]:9000", None, "not a valid IPv6 address"),
        ("bob:", None, "is not a port number"),
        ("bob:http", None, "is not a port number"),
        ("bob:70000", None, "outside 1-65535"),
        ("bob:0", None, "outside 1-65535"),
        ("https://bob:14320", None, "is not an address"),
        ("me@bob", None, "is not an address"),
        ("bob laptop", None, "not an IP address or a hostname"),
        ("-bob.local", None, "not an IP address or a hostname"),
        ("a" * 64 + ".local", None, "not an IP address or a hostname"),
        ("bob:9000", 9001, "says port 9000 but --port says 9001"),
    ],
)
def test_malformed_addresses_say_what_is_wrong(text: str, port: int | None, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_target(text, port)


def test_a_target_prints_ipv6_in_brackets() -> None:
    assert str(Target("::1", 9000)) == "[::1]:9000"
    assert str(Target("bob", 14320)) == "bob:14320"


def test_pair_invite_with_a_bad_address_exits_2_before_connecting(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    # No broker runs for tmp_path: reaching for one would exit 4, not 2.
    assert main(["invite", "999.1.1.1", "--data-dir", str(tmp_path)]) == exit_codes.USAGE
    assert "not a valid IPv4 address" in capsys.readouterr().err


def test_a_port_option_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["invite", "bob", "--port", "0"])
    assert caught.value.code == exit_codes.USAGE
    assert "outside 1-65535" in capsys.readouterr().err


@pytest.mark.parametrize("minutes", ["0", "16", "soon"])
def test_a_join_window_outside_1_to_15_minutes_is_a_usage_error(
    minutes: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["join", "--minutes", minutes])
    assert caught.value.code == exit_codes.USAGE
    assert "minutes" in capsys.readouterr().err


def test_pair_join_says_how_long_and_what_to_do_next() -> None:
    args = build_parser().parse_args(["join"])
    assert (args.command, args.minutes, args.close) == ("join", 10.0, False)
    assert build_parser().parse_args(["join", "--close"]).close
    window = JoinWindow(opened_at=1000.0, closes_at=1600.0)
    said = join_command.describe_open(window, 1000.0)
    assert said.startswith("This computer accepts invites for 10m00s more (until ")
    assert "pair invite ADDRESS" in said and "pair accept" in said and "--close" in said


def test_the_commands_parse() -> None:
    parser = build_parser()
    args = parser.parse_args(["accept", "a1b2", "--pin", "483920", "--data-dir", "/d"])
    assert (args.command, args.invite, args.pin, args.data_dir) == (
        "accept",
        "a1b2",
        "483920",
        "/d",
    )
    assert parser.parse_args(["decline"]).invite is None
    assert parser.parse_args(["cancel", "ff"]).invite == "ff"
    assert parser.parse_args(["cluster", "--json"]).json
    assert parser.parse_args(["invites"]).json is False
    assert parser.parse_args(["invite", "[::1]:9000"]).address == "[::1]:9000"
    assert parser.parse_args(["cluster", "--rename", "Home"]).rename == "Home"
    assert parser.parse_args(["remove", "bob", "--yes"]).node == "bob"
    assert parser.parse_args(["leave"]).yes is False


# -- PINs ---------------------------------------------------------------------------------------


def test_the_pin_is_shown_in_two_groups_of_three() -> None:
    assert format_pin("483920") == "483 920"
    assert format_pin("007007") == "007 007"


@pytest.mark.parametrize("typed", ["483920", "483 920", " 483-920 ", "483920\n"])
def test_a_pin_may_be_typed_as_it_is_shown(typed: str) -> None:
    assert normalize_pin(typed) == "483920"


@pytest.mark.parametrize("typed", ["", "48392", "4839201", "48392a", "４８３９２０", "483.920"])
def test_a_malformed_pin_is_refused_without_repeating_it(typed: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(PIN_MESSAGE)}$"):
        normalize_pin(typed)


def test_pair_accept_with_a_malformed_pin_exits_2_before_connecting(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    assert main(["accept", "--pin", "12345", "--data-dir", str(tmp_path)]) == exit_codes.USAGE
    err = capsys.readouterr().err
    assert "six digits" in err and "nothing was sent" in err and "12345" not in err


def test_the_big_pin_has_five_rows_and_a_gap_between_the_groups() -> None:
    rows = big_digits("888888")
    assert len(rows) == 5
    assert rows[0] == "    ".join([" ".join(["######"] * 3)] * 2)


def test_the_pin_prompt_takes_spaces_and_refuses_nonsense(
    capsys: pytest.CaptureFixture[str],
) -> None:
    prompts: list[str] = []

    def typed(answer: str) -> Any:
        def read(prompt: str) -> str:
            prompts.append(prompt)
            return answer

        return read

    invite = _invite()
    assert cluster_commands._ask_pin(invite, typed("483 920")) == "483920"
    assert prompts[0] == "PIN shown on bob-laptop (fingerprint ab12cd34ef567890): "
    assert cluster_commands._ask_pin(invite, typed("oops")) == exit_codes.USAGE
    assert "the invite stays open" in capsys.readouterr().err

    def no_input(_: str) -> str:
        raise EOFError

    assert cluster_commands._ask_pin(invite, no_input) == exit_codes.ERROR
    assert "no PIN typed" in capsys.readouterr().err


# -- invite ids ---------------------------------------------------------------------------------

FIRST = "a1b2c3d4" + "0" * 24
SECOND = "a1ff0000" + "0" * 24
THIRD = "b7000000" + "0" * 24


def test_an_invite_is_found_by_a_unique_prefix_or_its_whole_id() -> None:
    invites = [_invite(FIRST), _invite(SECOND), _invite(THIRD)]
    assert resolve_invite(invites, "a1b", "incoming", "accept").id == FIRST
    assert resolve_invite(invites, "A1F", "incoming", "accept").id == SECOND
    assert resolve_invite(invites, THIRD, "incoming", "accept").id == THIRD


def test_an_ambiguous_prefix_lists_the_candidates() -> None:
    invites = [_invite(FIRST), _invite(SECOND)]
    with pytest.raises(Unresolved, match=r"'a1' matches 2 invites \(a1b2c3d4, a1ff0000\)"):
        resolve_invite(invites, "a1", "incoming", "accept")


def test_no_match_says_why() -> None:
    invites = [
        _invite(FIRST, direction="outgoing"),
        _invite(SECOND, state="expired"),
    ]
    with pytest.raises(Unresolved, match="is outgoing: use `pair cancel`"):
        resolve_invite(invites, "a1b2", "incoming", "accept")
    with pytest.raises(Unresolved, match=r"is over \(expired\)"):
        resolve_invite(invites, "a1ff", "incoming", "accept")
    with pytest.raises(Unresolved, match="starting with 'ff'"):
        resolve_invite(invites, "ff", "incoming", "accept")


def test_without_an_id_the_only_open_invite_of_that_direction_is_meant() -> None:
    invites = [_invite(FIRST, state="declined"), _invite(SECOND), _invite(THIRD, "outgoing")]
    assert resolve_invite(invites, None, "incoming", "accept").id == SECOND
    assert resolve_invite(invites, None, "outgoing", "cancel").id == THIRD


def test_without_an_id_none_or_several_open_invites_need_a_word() -> None:
    with pytest.raises(
        Unresolved, match="Run `pair join` here, then start one on the other computer: `pair invite"
    ):
        resolve_invite([], None, "incoming", "accept")
    with pytest.raises(Unresolved, match="The open one here is incoming: `pair accept`"):
        resolve_invite([_invite()], None, "outgoing", "cancel")
    with pytest.raises(Unresolved, match=r"2 incoming invites are open; name one: `pair decline"):
        resolve_invite([_invite(FIRST), _invite(SECOND)], None, "incoming", "decline")


# -- outcomes -----------------------------------------------------------------------------------

ALL_STATES: tuple[InviteState, ...] = get_args(InviteState)


@pytest.mark.parametrize("direction", ["outgoing", "incoming"])
@pytest.mark.parametrize("state", ALL_STATES)
def test_every_outcome_starts_with_its_word_and_is_filled_in(
    state: InviteState, direction: InviteDirection
) -> None:
    text = describe_outcome(_invite(direction=direction, state=state, reason="because"))
    assert text.startswith(WORDS[state])
    assert "{" not in text and text.endswith(".")


@pytest.mark.parametrize(
    ("direction", "state", "says"),
    [
        ("outgoing", "paired", "Paired with bob-laptop: it is a member of this cluster now"),
        ("incoming", "paired", "Paired with bob-laptop"),
        ("outgoing", "wrong-pin", "did not match. A PIN is good for one try: `pair invite bob:9`"),
        ("incoming", "wrong-pin", "did not match the PIN bob-laptop shows"),
        ("outgoing", "declined", "Declined: bob-laptop declined the invite."),
        ("incoming", "declined", "Declined: the invite from bob-laptop was declined."),
        ("outgoing", "canceled", "Canceled: the invite to bob-laptop was canceled"),
        ("incoming", "canceled", "Canceled: bob-laptop canceled its invite."),
        ("outgoing", "expired", "within 5 minutes; `pair invite bob:9` sends a new one."),
        ("incoming", "expired", "ran out after 5 minutes"),
        ("outgoing", "rejected", "Rejected: it is in another cluster."),
        ("outgoing", "busy", "Busy: it is in another cluster."),
        ("outgoing", "locked-out", "Locked out: it is in another cluster. Wait, then invite"),
        ("outgoing", "failed", "Failed: it is in another cluster. Check the address and that PAIR"),
        ("incoming", "failed", "Failed: it is in another cluster. Invite this computer again"),
    ],
)
def test_outcomes_read_as_sentences_with_a_next_step(
    direction: InviteDirection, state: InviteState, says: str
) -> None:
    invite = _invite(direction=direction, state=state, reason="it is in another cluster.")
    assert says in describe_outcome(invite, "bob:9")


def test_an_outcome_without_a_reason_still_reads() -> None:
    assert describe_outcome(_invite(state="busy")) == "Busy: busy."
    assert "`pair invite 192.168.1.20`" in describe_outcome(_invite("x", "outgoing", "expired"))


def test_every_template_names_a_known_state() -> None:
    assert {state for _, state in OUTCOMES} <= set(ALL_STATES) == set(WORDS)


# -- tables -------------------------------------------------------------------------------------


def test_the_members_table() -> None:
    members = [_member(), _member(name="nas", address="fd00::7", node_port=15000, state="online")]
    lines = format_members(members).splitlines()
    assert lines[0].split() == [
        "NAME",
        "NODE",
        "ID",
        "ADDRESS:PORT",
        "FINGERPRINT",
        "STATE",
        "ADDED",
    ]
    added = time.strftime("%Y-%m-%d %H:%M", time.localtime(NOW - 3600))
    assert lines[1].split() == [
        "bob-laptop",
        "5e1f0a2b",
        "192.168.1.20:14320",
        "ab12cd34ef567890",
        "offline",
        *added.split(),
    ]
    assert lines[2].split()[:5] == [
        "nas",
        "5e1f0a2b",
        "[fd00::7]:15000",
        "ab12cd34ef567890",
        "online",
    ]
    assert format_members([]) == "no other members"


def test_the_invites_table_shows_open_invites_only() -> None:
    invites = [_invite(FIRST), _invite(SECOND, "outgoing"), _invite(THIRD, state="paired")]
    lines = format_invites(invites, NOW).splitlines()
    assert lines[0].split() == [
        "INVITE",
        "DIRECTION",
        "PEER",
        "ADDRESS",
        "FINGERPRINT",
        "EXPIRES",
        "IN",
    ]
    assert lines[1].split() == [
        "a1b2c3d4",
        "incoming",
        "bob-laptop",
        "192.168.1.20",
        "ab12cd34ef567890",
        "4m12s",
    ]
    assert lines[2].split()[:2] == ["a1ff0000", "outgoing"]
    assert len(lines) == 5 and "`pair accept`" in lines[4]
    assert format_invites([_invite(state="expired")], NOW) == "no open invites"


def test_expiry_and_fingerprints_are_short() -> None:
    assert expires_in(_invite(), NOW) == "4m12s"
    assert expires_in(_invite(), NOW + 240) == "12s"
    assert expires_in(_invite(), NOW + 999) == "now"
    assert short_fingerprint(FINGERPRINT) == "ab12cd34ef567890"
    assert short_fingerprint("") == "-"


def test_the_cluster_view_outside_and_inside_a_cluster() -> None:
    alone = ClusterStatus(node_id=SELF_ID, fingerprint=FINGERPRINT, key_protection="file")
    text = format_cluster(alone, NOW)
    assert f"this node    {SELF_ID}" in text and f"fingerprint  {FINGERPRINT}" in text
    assert "a plain 0600 file" in text and "not in a cluster" in text
    assert text.endswith("no other members\n\nno open invites")
    together = msgspec.structs.replace(
        alone,
        key_protection="keyring",
        cluster_id="c0ffee00-0000-4000-8000-000000000000",
        cluster_name="My computers",
        members=[_member()],
        invites=[_invite()],
    )
    text = format_cluster(together, NOW)
    assert "cluster      My computers (c0ffee00-0000-4000-8000-000000000000)" in text
    assert "OS keyring" in text and "bob-laptop" in text and "a1b2c3d4" in text


def test_the_opened_invite_says_what_to_do() -> None:
    text = format_invite_opened(_invite(direction="outgoing"), "483920", big=False)
    assert "    PIN  483 920" in text
    assert "Invited bob-laptop at 192.168.1.20 (fingerprint ab12cd34ef567890)." in text
    assert "Type this PIN on bob-laptop (pair accept, or the PAIR window there)." in text
    assert "Ctrl+C cancels the invite" in text and "#" not in text
    assert "######" in format_invite_opened(_invite(direction="outgoing"), "483920", big=True)


def test_status_shows_the_fingerprint_and_the_cluster() -> None:
    status = BrokerStatus(
        version="0.1.0",
        pid=1,
        started_at=NOW,
        uptime_ms=1000,
        data_dir="/d",
        node_id=SELF_ID,
        node_name="alice",
        control_address="/s",
        log_file=None,
        ports=Ports(node=14320, ollama=11434, openai=1234, llamacpp=8080),
        components=[],
        errors=[],
    )
    text = format_status(status)
    assert "fingerprint -" in text and "cluster     not in a cluster" in text
    text = format_status(msgspec.structs.replace(status, fingerprint=FINGERPRINT, cluster_id="c1"))
    assert f"fingerprint {FINGERPRINT}" in text and "cluster     c1" in text
    assert "placement   -" in text
    text = format_status(msgspec.structs.replace(status, placement="reference"))
    assert "placement   reference (pending jobs + GPU pressure + reservations)" in text
    # Another member's errors are tagged with it; this node's are not.
    mine = ServiceError(id="a", node_id=SELF_ID, message="here", created_at=NOW, updated_at=NOW)
    theirs = msgspec.structs.replace(mine, id="b", node_id=PEER_ID, message="there")
    lines = format_status(msgspec.structs.replace(status, errors=[mine, theirs])).splitlines()
    assert "ERROR   a: here" in lines
    assert f"ERROR   b (on {PEER_ID[:8]}): there" in lines


# -- waiting for the outcome --------------------------------------------------------------------


def _push(event: InviteChanged | MembershipChanged) -> tuple[str, Any]:
    return methods.CLUSTER_EVENT.name, msgspec.to_builtins(event)


async def test_the_watch_keeps_pushes_that_come_before_the_wait() -> None:
    watch = InviteWatch()
    watch.on_push(*_push(InviteChanged(seq=1, invite=_invite(FIRST, "outgoing"))))
    watch.on_push(*_push(InviteChanged(seq=2, invite=_invite(FIRST, "outgoing", "paired"))))
    watch.on_push("engine:event", {"event": "state_changed"})
    status = ClusterStatus(node_id=SELF_ID, fingerprint=FINGERPRINT, key_protection="file")
    watch.on_push(*_push(MembershipChanged(seq=3, status=status)))
    ended = await asyncio.wait_for(watch.wait_ended(FIRST), 1)
    assert ended.state == "paired"


class ScriptedPeer:
    """Answers ``cluster:*`` calls from a script and records them; pushes go to ``watch``."""

    def __init__(self, watch: InviteWatch, invite: Invite, statuses: list[Invite]) -> None:
        self.watch = watch
        self.invite = invite
        self.statuses = statuses
        self.calls: list[str] = []
        self.closed = asyncio.Event()
        self.on_invite: list[Invite] = []  # pushed right after the invite is answered

    async def call(self, method: str, params: Any = None, *, timeout: float | None = 10) -> Any:
        self.calls.append(method)
        empty = ClusterStatus(node_id=SELF_ID, fingerprint=FINGERPRINT, key_protection="file")
        if method == methods.CLUSTER_SUBSCRIBE.name:
            return {"seq": 0, "status": msgspec.to_builtins(empty)}
        if method == methods.CLUSTER_INVITE.name:
            loop = asyncio.get_running_loop()
            for seq, pushed in enumerate(self.on_invite, 1):
                loop.call_soon(self.watch.on_push, *_push(InviteChanged(seq=seq, invite=pushed)))
            return {"invite": msgspec.to_builtins(self.invite), "pin": "483920"}
        if method == methods.CLUSTER_STATUS.name:
            found = msgspec.structs.replace(empty, invites=[self.statuses.pop(0)])
            return msgspec.to_builtins(found)
        if method == methods.CLUSTER_CANCEL.name:
            return msgspec.to_builtins(msgspec.structs.replace(self.invite, state="canceled"))
        raise AssertionError(method)

    async def wait_closed(self) -> None:
        await self.closed.wait()


def _opened(expires_in_s: float = 300.0) -> Invite:
    invite = _invite(FIRST, "outgoing")
    now = time.time()
    return msgspec.structs.replace(invite, created_at=now, expires_at=now + expires_in_s)


async def _run_invite(peer: ScriptedPeer) -> int:
    target = Target("192.168.1.20", 14320)
    coro = cluster_commands._invite(cast(RpcPeer, peer), target, peer.watch)
    return await asyncio.wait_for(coro, 5)


async def test_invite_waits_for_the_pushed_outcome(capsys: pytest.CaptureFixture[str]) -> None:
    watch = InviteWatch()
    peer = ScriptedPeer(watch, _opened(), [])
    peer.on_invite = [_opened(), msgspec.structs.replace(_opened(), state="wrong-pin")]
    assert await _run_invite(peer) == exit_codes.ERROR
    out = capsys.readouterr().out
    assert "PIN  483 920" in out and "Wrong PIN: the PIN typed on bob-laptop" in out
    assert peer.calls == [methods.CLUSTER_SUBSCRIBE.name, methods.CLUSTER_INVITE.name]


async def test_invite_asks_the_broker_once_the_expiry_passed_without_a_push(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cluster_commands, "EXPIRY_GRACE_S", 0.0)
    monkeypatch.setattr(cluster_commands, "POLL_S", 0.01)
    opened = _opened(expires_in_s=-1.0)
    peer = ScriptedPeer(InviteWatch(), opened, [opened, _invite(FIRST, "outgoing", "paired")])
    assert await _run_invite(peer) == exit_codes.OK
    assert "Paired with bob-laptop" in capsys.readouterr().out
    assert peer.calls.count(methods.CLUSTER_STATUS.name) == 2


async def test_invite_reports_a_broker_that_went_away(capsys: pytest.CaptureFixture[str]) -> None:
    peer = ScriptedPeer(InviteWatch(), _opened(), [])
    asyncio.get_running_loop().call_later(0.05, peer.closed.set)
    assert await _run_invite(peer) == exit_codes.ERROR
    assert "the broker stopped while waiting" in capsys.readouterr().err


async def test_interrupting_the_wait_cancels_the_invite(capsys: pytest.CaptureFixture[str]) -> None:
    peer = ScriptedPeer(InviteWatch(), _opened(), [])
    target = Target("192.168.1.20", 14320)
    task = asyncio.ensure_future(cluster_commands._invite(cast(RpcPeer, peer), target, peer.watch))
    while methods.CLUSTER_INVITE.name not in peer.calls:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    task.cancel()  # what asyncio.run does on Ctrl+C
    assert await asyncio.wait_for(task, 5) == exit_codes.ERROR
    assert peer.calls[-1] == methods.CLUSTER_CANCEL.name
    assert "Canceled: the invite to bob-laptop was canceled" in capsys.readouterr().out


async def test_an_invite_that_did_not_open_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    refused = _invite(FIRST, "outgoing", "rejected", "that computer is in another cluster")
    peer = ScriptedPeer(InviteWatch(), refused, [])
    assert await _run_invite(peer) == exit_codes.ERROR
    out = capsys.readouterr().out
    assert "Rejected: that computer is in another cluster." in out and "PIN" not in out


# -- members: remove and leave ------------------------------------------------------------------

OTHER_ID = NodeId("5e77aaaa-1111-4222-8333-944455556666")


def _clustered() -> ClusterStatus:
    return ClusterStatus(
        node_id=SELF_ID,
        fingerprint=FINGERPRINT,
        key_protection="file",
        cluster_id="c0ffee00-0000-4000-8000-000000000000",
        cluster_name="Home",
        members=[_member(), _member(node_id=OTHER_ID, name="nas")],
    )


def test_a_member_is_found_by_id_prefix_or_name() -> None:
    status = _clustered()
    assert resolve_member(status, "5e1f").node_id == PEER_ID
    assert resolve_member(status, "NAS").node_id == OTHER_ID
    assert resolve_member(status, PEER_ID).name == "bob-laptop"


def test_a_member_that_is_not_one_says_what_to_do() -> None:
    status = _clustered()
    with pytest.raises(Unresolved, match=r"'5e' matches 2 members \(bob-laptop \(5e1f0a2b\)"):
        resolve_member(status, "5e")
    with pytest.raises(Unresolved, match="no member has the node id or name 'carol'"):
        resolve_member(status, "carol")
    with pytest.raises(Unresolved, match="is this computer: `pair leave`"):
        resolve_member(status, SELF_ID[:6])
    with pytest.raises(Unresolved, match="no member"):
        resolve_member(status, "")


def test_remove_and_leave_say_what_happened() -> None:
    removed = MemberRemoved(
        node_id=PEER_ID, name="bob-laptop", fingerprint=FINGERPRINT, removed_at=NOW
    )
    text = describe_removed(removed)
    assert text.startswith("Removed bob-laptop (5e1f0a2b, fingerprint ab12cd34ef567890) for good")
    left = ClusterLeft(cluster_id="c0ffee00", told=[PEER_ID], not_told=[OTHER_ID])
    lines = describe_left(left, _clustered()).splitlines()
    assert lines[0].startswith("Left the cluster Home: ")
    assert lines[1] == "Told: bob-laptop."
    assert lines[2].startswith("Not reached in time: nas.") and "`pair remove 0f3c2a9e`" in lines[2]
    assert len(describe_left(ClusterLeft(cluster_id="c"), _clustered()).splitlines()) == 1


def test_the_cluster_view_says_who_removed_this_computer() -> None:
    removed = RemovedFromCluster(
        cluster_id="c1", cluster_name="Home", by=PEER_ID, by_name="bob", at=NOW
    )
    alone = ClusterStatus(
        node_id=SELF_ID, fingerprint=FINGERPRINT, key_protection="file", removed=removed
    )
    line = next(
        line for line in format_cluster(alone, NOW).splitlines() if line.startswith("removed")
    )
    assert "from Home by bob on " in line and "for good" in line


@pytest.mark.parametrize(
    ("answer", "agreed"), [("y", True), (" YES ", True), ("", False), ("n", False)]
)
def test_a_question_needs_a_yes(answer: str, agreed: bool) -> None:
    assert confirm.agreed(lambda _: answer, "Remove? ") is agreed


def test_no_answer_is_a_no(capsys: pytest.CaptureFixture[str]) -> None:
    def closed(_: str) -> str:
        raise EOFError

    assert confirm.agreed(closed, "Remove? ") is False
