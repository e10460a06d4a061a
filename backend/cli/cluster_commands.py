"""``pair cluster``, ``pair invite``, ``pair invites``, ``pair accept``, ``pair decline``,
``pair cancel``, ``pair remove``, ``pair leave`` (and ``pair join``, in ``join_command``): this
node's cluster, the PIN pairing that grows it and the ways out of it (docs/CLUSTER.md).

``pair invite`` shows the PIN and waits until the invite ends; the other computer, after
``pair join``, types the PIN with ``pair accept`` (or in its PAIR window). Outcomes are states,
said in words: exit 0 only for ``paired``. The parsing and the wording are in
``cluster_format``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from backend.cli import exit_codes, join_command
from backend.cli.client_commands import run_with_broker
from backend.cli.cluster_format import (
    BUSY_HERE,
    DEFAULT_NODE_PORT,
    SHORT_ID,
    Target,
    Unresolved,
    describe_left,
    describe_outcome,
    describe_removed,
    format_cluster,
    format_invite_opened,
    format_invites,
    normalize_pin,
    parse_port,
    parse_target,
    resolve_invite,
    resolve_member,
    short_fingerprint,
)
from backend.cli.confirm import agreed
from backend.common.tasks import wait_first
from backend.protocol import contract, errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import NodeId
from backend.protocol.types.cluster import (
    ClusterRename,
    ClusterStatus,
    Invite,
    InviteAnswer,
    InviteChanged,
    InviteCreated,
    InviteDirection,
    InviteParams,
    InviteRef,
    MemberRef,
)

# The broker asks the other node for its node-info, its certificate and the offer, each bounded
# at 10 s; accepting runs four exchanges and a hello. A lost network shows up in these bounds.
INVITE_TIMEOUT_S = 60.0
ACCEPT_TIMEOUT_S = 60.0
END_TIMEOUT_S = 30.0  # cancel tells the other computer, best effort, within ~20 s
EXPIRY_GRACE_S = 5.0  # the broker ends expired invites every second; then we ask it
POLL_S = 1.0  # past the expiry and the grace, how often to ask


# -- commands -----------------------------------------------------------------------------------


def add_parsers(commands: Any, add_data_dir: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register the cluster commands on the ``pair`` parser."""
    cluster = commands.add_parser("cluster", help="this node's identity, cluster and members")
    cluster.add_argument("--json", action="store_true", help="print the raw status as JSON")
    invite = commands.add_parser("invite", help="invite a computer: shows a PIN, then waits")
    invite.add_argument("address", help="ADDRESS[:PORT]: IPv4, [IPv6]:PORT, IPv6 or hostname")
    invite.add_argument(
        "--port", type=_port_option, help=f"its node API port (default {DEFAULT_NODE_PORT})"
    )
    invites = commands.add_parser("invites", help="list the open invites, sent and received")
    invites.add_argument("--json", action="store_true", help="print them as JSON")
    accept = commands.add_parser("accept", help="accept a received invite with its PIN")
    accept.add_argument("invite", nargs="?", help="its id or a unique prefix (default: the one)")
    accept.add_argument("--pin", help="the six digits (asked for when not given)")
    decline = commands.add_parser("decline", help="decline a received invite")
    cancel = commands.add_parser("cancel", help="cancel an invite this computer sent")
    for parser in (decline, cancel):
        parser.add_argument(
            "invite", nargs="?", help="its id or a unique prefix (default: the one)"
        )
    cluster.add_argument("--rename", metavar="NAME", help="rename the cluster (every member)")
    remove = commands.add_parser("remove", help="remove a member from this cluster for good")
    remove.add_argument("node", help="its node id, a unique prefix of it, or its name")
    leave = commands.add_parser("leave", help="take this computer out of its cluster")
    for parser in (remove, leave):
        parser.add_argument("--yes", action="store_true", help="do not ask before doing it")
    for parser in (cluster, invite, invites, accept, decline, cancel, remove, leave):
        add_data_dir(parser)
    join_command.add_parser(commands, add_data_dir)


def _port_option(text: str) -> int:
    try:
        return parse_port(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int | None:
    """Run the command if it is one of these; ``None`` otherwise."""
    if args.command == "cluster" and args.rename is not None:
        return rename_cluster(args.data_dir, args.rename)
    if args.command == "cluster":
        return show_cluster(args.data_dir, as_json=args.json)
    if args.command == "remove":
        return remove_member(args.data_dir, args.node, confirmed=args.yes)
    if args.command == "leave":
        return leave_cluster(args.data_dir, confirmed=args.yes)
    if args.command == "invite":
        return invite(args.data_dir, args.address, args.port)
    if args.command == "invites":
        return list_invites(args.data_dir, as_json=args.json)
    if args.command == "accept":
        return accept(args.data_dir, args.invite, args.pin)
    if args.command == "decline":
        return end_invite(args.data_dir, args.invite, "incoming")
    if args.command == "cancel":
        return end_invite(args.data_dir, args.invite, "outgoing")
    return join_command.run(args)


def show_cluster(data_dir: str | None, *, as_json: bool) -> int:
    """``pair cluster``."""

    async def work(peer: RpcPeer) -> int:
        status = await contract.call(peer, methods.CLUSTER_STATUS)
        print(_json(status) if as_json else format_cluster(status, time.time()))
        return exit_codes.OK

    return _run(data_dir, work)


def list_invites(data_dir: str | None, *, as_json: bool) -> int:
    """``pair invites``."""

    async def work(peer: RpcPeer) -> int:
        status = await contract.call(peer, methods.CLUSTER_STATUS)
        open_ones = [invite for invite in status.invites if invite.state == "pending"]
        print(_json(open_ones) if as_json else format_invites(open_ones, time.time()))
        return exit_codes.OK

    return _run(data_dir, work)


def invite(data_dir: str | None, address: str, port: int | None) -> int:
    """``pair invite``: open the invite, show the PIN, wait for the outcome (exit 0: paired)."""
    try:
        target = parse_target(address, port)
    except ValueError as exc:
        print(f"pair invite: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    watch = InviteWatch()
    return _run(
        data_dir,
        lambda peer: _invite_until_stopped(peer, target, watch),
        on_push=watch.on_push,
        interrupted="pair invite: interrupted; if the invite is still open, `pair cancel` ends it",
    )


async def _invite_until_stopped(peer: RpcPeer, target: Target, watch: InviteWatch) -> int:
    with _terminate_cancels():
        return await _invite(peer, target, watch)


@contextlib.contextmanager
def _terminate_cancels() -> Iterator[None]:
    """SIGTERM (``timeout``, a service manager) cancels the invite as Ctrl+C does, once; an open
    invite left behind would make both computers ``busy`` for five minutes."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()

    def on_terminate() -> None:
        loop.remove_signal_handler(signal.SIGTERM)  # a second SIGTERM ends us at once
        if task is not None:
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_terminate)
    except (NotImplementedError, RuntimeError, ValueError):  # Windows; not the main thread
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _invite(peer: RpcPeer, target: Target, watch: InviteWatch) -> int:
    # Subscribe first: the outcome may come at any moment after the invite opens.
    snapshot = await contract.call(peer, methods.CLUSTER_SUBSCRIBE)
    try:
        created, interrupted = await _open_invite(peer, target)
    except errors.RpcError as exc:
        print(f"pair invite: {_invite_error(exc)}", file=sys.stderr)
        return exit_codes.ERROR
    opened = created.invite
    if opened.state != "pending" or not created.pin:
        print(_not_opened(opened, target, snapshot.status))
        return exit_codes.ERROR
    if interrupted:
        return await _cancel_invite(peer, opened, target)
    print(format_invite_opened(opened, created.pin, big=sys.stdout.isatty()), flush=True)
    try:
        ended = await _wait_outcome(peer, watch, opened)
    except asyncio.CancelledError:  # Ctrl+C or SIGTERM cancel us once: clean up
        return await _cancel_invite(peer, opened, target)
    if ended is None:
        print(
            "pair invite: the broker stopped while waiting, and the invite ended with it; "
            "start it again (`pair node`), then invite again",
            file=sys.stderr,
        )
        return exit_codes.ERROR
    print(describe_outcome(ended, str(target)))
    return exit_codes.OK if ended.state == "paired" else exit_codes.ERROR


async def _open_invite(peer: RpcPeer, target: Target) -> tuple[InviteCreated, bool]:
    """The broker's answer to ``cluster:invite``, and whether Ctrl+C came while it was due."""
    params = InviteParams(address=target.host, port=target.port)
    # The broker opens the invite whether or not we still wait: through Ctrl+C, keep waiting for
    # its answer (a task this function owns and always awaits) so the invite can be canceled.
    call = asyncio.get_running_loop().create_task(
        contract.call(peer, methods.CLUSTER_INVITE, params, timeout=INVITE_TIMEOUT_S),
        name="cli:invite",
    )
    try:
        return await asyncio.shield(call), False
    except asyncio.CancelledError:
        print("Interrupted: the invite is canceled as soon as it opens.", file=sys.stderr)
        return await call, True


def _invite_error(exc: errors.RpcError) -> str:
    if isinstance(exc, errors.Unavailable):
        return f"{exc.message} (`pair status` on that computer shows its node port)"
    if isinstance(exc, errors.InvalidParams):
        return f"{exc.message}; give the other computer's address"
    if isinstance(exc, errors.Conflict):
        return f"{exc.message} (`pair cluster` lists the members)"
    return f"the broker answered with an error: {exc.message}"


def _not_opened(invite: Invite, target: Target, before: ClusterStatus) -> str:
    # The broker says "busy" in the same words whichever side has the open pairing; here, only
    # an invite this computer sent blocks another (received ones never do).
    here = [i for i in before.invites if i.state == "pending" and i.direction == "outgoing"]
    if invite.state == "busy" and here:
        other = ", ".join(f"{i.direction} {i.id[:SHORT_ID]} with {i.peer_name}" for i in here)
        return BUSY_HERE.format(other=other)
    return describe_outcome(invite, str(target))


async def _cancel_invite(peer: RpcPeer, invite: Invite, target: Target) -> int:
    print("Canceling the invite...", file=sys.stderr, flush=True)
    ref = InviteRef(id=invite.id)
    ended = await contract.call(peer, methods.CLUSTER_CANCEL, ref, timeout=END_TIMEOUT_S)
    print(describe_outcome(ended, str(target)))
    return exit_codes.OK if ended.state == "paired" else exit_codes.ERROR


class InviteWatch:
    """The latest state of every invite seen in ``cluster:event`` pushes (which can arrive before
    the answer that names the invite)."""

    def __init__(self) -> None:
        self._latest: dict[str, Invite] = {}
        self._changed = asyncio.Event()

    def on_push(self, method: str, params: Any) -> None:
        """Handle one push (the CLI connection's notification hook)."""
        if method != methods.CLUSTER_EVENT.name:
            return
        event = methods.CLUSTER_EVENT.decode(params)
        if isinstance(event, InviteChanged):
            self._latest[event.invite.id] = event.invite
            self._changed.set()

    async def wait_ended(self, invite_id: str) -> Invite:
        """The invite once a push says it is no longer pending."""
        while True:
            invite = self._latest.get(invite_id)
            if invite is not None and invite.state != "pending":
                return invite
            self._changed.clear()
            await self._changed.wait()


async def _wait_outcome(peer: RpcPeer, watch: InviteWatch, invite: Invite) -> Invite | None:
    """How ``invite`` ended; ``None`` if the broker went away first."""
    ended: list[Invite] = []

    async def until_ended() -> None:
        while True:
            budget = max(POLL_S, invite.expires_at - time.time() + EXPIRY_GRACE_S)
            try:
                async with asyncio.timeout(budget):
                    ended.append(await watch.wait_ended(invite.id))
                    return
            except TimeoutError:  # no push past the expiry: ask for the invite's state
                status = await contract.call(peer, methods.CLUSTER_STATUS)
                found = next((i for i in status.invites if i.id == invite.id), None)
                if found is None or found.state != "pending":
                    ended.append(found or _forgotten(invite))
                    return

    winner = await wait_first(until_ended(), peer.wait_closed(), name="cli:invite-wait")
    return ended[0] if winner == 0 else None


def _forgotten(invite: Invite) -> Invite:
    reason = "the broker no longer knows this invite (was it restarted?)"
    return msgspec.structs.replace(invite, state="failed", reason=reason)


def accept(
    data_dir: str | None,
    given: str | None,
    pin: str | None,
    read_pin: Callable[[str], str] = getpass.getpass,
) -> int:
    """``pair accept``: answer a received invite with the PIN (exit 0: paired)."""
    if pin is None:
        status = _fetch_status(data_dir)
        if isinstance(status, int):
            return status
        try:
            chosen = resolve_invite(status.invites, given, "incoming", "accept")
        except Unresolved as exc:
            print(f"pair accept: {exc}", file=sys.stderr)
            return exit_codes.ERROR
        typed = _ask_pin(chosen, read_pin)
        if isinstance(typed, int):
            return typed
        given, pin = chosen.id, typed
    try:
        pin = normalize_pin(pin)
    except ValueError as exc:
        print(f"pair accept: {exc}; nothing was sent, the invite stays open", file=sys.stderr)
        return exit_codes.USAGE
    return _run(
        data_dir,
        lambda peer: _accept(peer, given, pin),
        interrupted="pair accept: interrupted; the pairing may still finish (`pair cluster`)",
    )


def _ask_pin(invite: Invite, read_pin: Callable[[str], str]) -> str | int:
    fingerprint = short_fingerprint(invite.peer_fingerprint)
    prompt = f"PIN shown on {invite.peer_name} (fingerprint {fingerprint}): "
    try:
        return normalize_pin(read_pin(prompt))
    except (EOFError, KeyboardInterrupt):
        print("\npair accept: no PIN typed; the invite stays open", file=sys.stderr)
        return exit_codes.ERROR
    except ValueError as exc:
        print(f"pair accept: {exc}; the invite stays open, `pair accept` again", file=sys.stderr)
        return exit_codes.USAGE


async def _accept(peer: RpcPeer, given: str | None, pin: str) -> int:
    found = await _resolve(peer, given, "incoming", "accept")
    if found is None:
        return exit_codes.ERROR
    print(f"Pairing with {found.peer_name}...", flush=True)
    answer = InviteAnswer(id=found.id, pin=pin)
    try:
        ended = await contract.call(peer, methods.CLUSTER_ACCEPT, answer, timeout=ACCEPT_TIMEOUT_S)
    except (errors.NotFound, errors.Conflict, errors.InvalidParams) as exc:
        print(f"pair accept: {exc.message} (`pair invites` lists the open ones)", file=sys.stderr)
        return exit_codes.ERROR
    print(describe_outcome(ended))
    return exit_codes.OK if ended.state == "paired" else exit_codes.ERROR


def end_invite(data_dir: str | None, given: str | None, direction: InviteDirection) -> int:
    """``pair decline`` (an incoming invite) and ``pair cancel`` (an outgoing one)."""
    verb, method = ("decline", methods.CLUSTER_DECLINE)
    if direction == "outgoing":
        verb, method = ("cancel", methods.CLUSTER_CANCEL)

    async def work(peer: RpcPeer) -> int:
        found = await _resolve(peer, given, direction, verb)
        if found is None:
            return exit_codes.ERROR
        ref = InviteRef(id=found.id)
        try:
            ended = await contract.call(peer, method, ref, timeout=END_TIMEOUT_S)
        except (errors.NotFound, errors.Conflict) as exc:
            print(f"pair {verb}: {exc.message} (`pair invites`)", file=sys.stderr)
            return exit_codes.ERROR
        print(describe_outcome(ended))
        return exit_codes.OK if ended.state in ("declined", "canceled") else exit_codes.ERROR

    return _run(data_dir, work)


async def _resolve(
    peer: RpcPeer, given: str | None, direction: InviteDirection, verb: str
) -> Invite | None:
    status = await contract.call(peer, methods.CLUSTER_STATUS)
    try:
        return resolve_invite(status.invites, given, direction, verb)
    except Unresolved as exc:
        print(f"pair {verb}: {exc}", file=sys.stderr)
        return None


def rename_cluster(data_dir: str | None, name: str) -> int:
    """``pair cluster --rename NAME``."""

    async def work(peer: RpcPeer) -> int:
        try:
            status = await contract.call(peer, methods.CLUSTER_RENAME, ClusterRename(name=name))
        except (errors.InvalidParams, errors.Conflict) as exc:
            hint = "; `pair invite ADDRESS` starts one" if isinstance(exc, errors.Conflict) else ""
            print(f"pair cluster: {exc.message}{hint}", file=sys.stderr)
            return exit_codes.ERROR
        print(f"The cluster is called {status.cluster_name!r} now; the other members follow.")
        return exit_codes.OK

    return _run(data_dir, work)


def remove_member(
    data_dir: str | None, given: str, *, confirmed: bool, ask: Callable[[str], str] = input
) -> int:
    """``pair remove NODE``: out of the cluster for good (its identity can never rejoin)."""
    status = _fetch_status(data_dir)
    if isinstance(status, int):
        return status
    try:
        member = resolve_member(status, given)
    except Unresolved as exc:
        print(f"pair remove: {exc}", file=sys.stderr)
        return exit_codes.ERROR
    question = f"Remove {member.name} ({member.node_id[:SHORT_ID]}) for good? [y/N] "
    if not confirmed and not agreed(ask, question):
        print("Nothing removed (`--yes` skips the question).", file=sys.stderr)
        return exit_codes.ERROR
    return _run(data_dir, lambda peer: _remove(peer, member.node_id))


async def _remove(peer: RpcPeer, node_id: NodeId) -> int:
    ref = MemberRef(node_id=node_id)
    try:
        removed = await contract.call(peer, methods.CLUSTER_REMOVE, ref, timeout=END_TIMEOUT_S)
    except (errors.NotFound, errors.InvalidParams) as exc:
        print(f"pair remove: {exc.message} (`pair cluster` lists them)", file=sys.stderr)
        return exit_codes.ERROR
    print(describe_removed(removed))
    return exit_codes.OK


def leave_cluster(
    data_dir: str | None, *, confirmed: bool, ask: Callable[[str], str] = input
) -> int:
    """``pair leave``: tell the members, then trust none of them."""
    status = _fetch_status(data_dir)
    if isinstance(status, int):
        return status
    if status.cluster_id is None:
        print("pair leave: this computer is in no cluster", file=sys.stderr)
        return exit_codes.ERROR
    question = f"Leave the cluster {status.cluster_name or status.cluster_id}? [y/N] "
    if not confirmed and not agreed(ask, question):
        print("Still in the cluster (`--yes` skips the question).", file=sys.stderr)
        return exit_codes.ERROR

    async def work(peer: RpcPeer) -> int:
        try:
            left = await contract.call(peer, methods.CLUSTER_LEAVE, timeout=END_TIMEOUT_S)
        except errors.Conflict as exc:
            print(f"pair leave: {exc.message}", file=sys.stderr)
            return exit_codes.ERROR
        print(describe_left(left, status))
        return exit_codes.OK

    return _run(data_dir, work)


def _fetch_status(data_dir: str | None) -> ClusterStatus | int:
    """``cluster:status`` on a connection of its own, or the exit code of its failure. Questions
    are asked between connections: asyncio's Ctrl+C handler would swallow one inside the loop."""
    got: list[ClusterStatus] = []

    async def work(peer: RpcPeer) -> int:
        got.append(await contract.call(peer, methods.CLUSTER_STATUS))
        return exit_codes.OK

    code = _run(data_dir, work)
    return got[0] if got and code == exit_codes.OK else code


def _run(
    data_dir: str | None,
    work: Callable[[RpcPeer], Any],
    on_push: Callable[[str, Any], None] | None = None,
    interrupted: str = "pair: interrupted",
) -> int:
    try:
        return run_with_broker(data_dir, work, on_push)
    except KeyboardInterrupt:
        print(f"\n{interrupted}", file=sys.stderr)
        return exit_codes.ERROR


def _json(value: object) -> str:
    return msgspec.json.format(msgspec.json.encode(value)).decode()
