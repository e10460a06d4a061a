"""One progress bar for pulls and installs: a pull of this node from its ``pull_progressed``
events, an install from ``install_progressed``, and the same on another member from the
``pulls`` and ``installs`` of its ``member_changed`` events, drawn exactly alike."""

from __future__ import annotations

import io

import msgspec

from backend.cli.progress_bar import ProgressBar, progress_line
from backend.protocol import methods
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import (
    EngineEvent,
    EngineModelsChanged,
    InstallProgressed,
    MemberEnginesLeft,
    PullProgressed,
)
from tests.unit.cli.scripted import (
    BOB,
    CAROL,
    INSTALL,
    MODEL,
    NO_MODELS,
    OLLAMA,
    REMOTE_PULL,
    changed,
    drawn,
    install,
    pull,
)

LLAMACPP = EngineName("llamacpp")


def feed(bar: ProgressBar, events: list[EngineEvent]) -> None:
    for event in events:
        bar.on_push(methods.ENGINE_EVENT.name, msgspec.to_builtins(event))


def test_a_members_pull_is_drawn_from_its_member_changed_events() -> None:
    out = io.StringIO()
    bar = ProgressBar(OLLAMA, MODEL, out, node=BOB)
    feed(
        bar,
        [
            changed(1, BOB, [REMOTE_PULL[0]]),
            changed(2, CAROL, [pull(77.0)]),  # another member's pull of the same model
            changed(3, BOB, [REMOTE_PULL[1], pull(50.0, model="other")]),
            changed(4, BOB, [REMOTE_PULL[1]]),  # something else changed: the same progress
            PullProgressed(seq=5, progress=pull(99.0)),  # a local pull, not this one
            EngineModelsChanged(seq=6, models=NO_MODELS),
            changed(7, BOB, [REMOTE_PULL[2]]),
            changed(8, BOB),  # the pull is over and left the member's list
            MemberEnginesLeft(seq=9, node_id=BOB),
        ],
    )
    assert drawn(out) == [progress_line(p) for p in REMOTE_PULL]
    assert drawn(out)[1] == "[###...........................]  12.5%  pulling"


def test_a_remote_pull_prints_exactly_what_the_same_local_pull_prints() -> None:
    local, remote = io.StringIO(), io.StringIO()
    feed(
        ProgressBar(OLLAMA, MODEL, local),
        [PullProgressed(seq=n, progress=p) for n, p in enumerate(REMOTE_PULL, 1)],
    )
    feed(
        ProgressBar(OLLAMA, MODEL, remote, node=BOB),
        [changed(n, BOB, [p]) for n, p in enumerate(REMOTE_PULL, 1)],
    )
    assert remote.getvalue() == local.getvalue() != ""


def test_a_local_pull_ignores_the_members_pulls() -> None:
    out = io.StringIO()
    bar = ProgressBar(OLLAMA, MODEL, out)
    feed(bar, [changed(1, BOB, [pull(40.0)])])
    bar.on_push(methods.ERRORS_UPDATE.name, [])
    assert out.getvalue() == ""
    bar.end_line()
    assert out.getvalue() == ""  # nothing drawn: no line to end


def test_a_local_install_is_drawn_from_install_progressed_of_its_engine_only() -> None:
    out = io.StringIO()
    bar = ProgressBar(OLLAMA, out=out)
    feed(
        bar,
        [
            InstallProgressed(seq=1, progress=INSTALL[0]),
            InstallProgressed(seq=2, progress=install(90.0, engine=LLAMACPP)),  # another engine
            PullProgressed(seq=3, progress=pull(60.0)),  # a pull into the same engine
            changed(4, BOB, installs=[install(70.0)]),  # the same install on a member
            *(InstallProgressed(seq=n, progress=p) for n, p in enumerate(INSTALL[1:], 5)),
        ],
    )
    assert drawn(out) == [progress_line(p) for p in INSTALL]
    assert drawn(out)[1] == "[############..................]  40.0%  downloading"
    assert drawn(out)[2] == "unpacking"
    bar.end_line()
    assert out.getvalue().endswith("\n")


def test_a_members_install_is_drawn_from_its_installs_exactly_like_a_local_one() -> None:
    local, remote = io.StringIO(), io.StringIO()
    feed(
        ProgressBar(OLLAMA, out=local),
        [InstallProgressed(seq=n, progress=p) for n, p in enumerate(INSTALL, 1)],
    )
    bar = ProgressBar(OLLAMA, out=remote, node=BOB)
    feed(
        bar,
        [
            changed(1, BOB, installs=[INSTALL[0]]),
            changed(2, CAROL, installs=[install(10.0)]),  # another member installs it too
            changed(3, BOB, [pull(20.0)], [INSTALL[1], install(5.0, engine=LLAMACPP)]),
            changed(4, BOB, [pull(30.0)], [INSTALL[1]]),  # only its pull moved on
            InstallProgressed(seq=5, progress=install(80.0)),  # an install on this node
            changed(6, BOB, installs=[INSTALL[2]]),
            changed(7, BOB, installs=[INSTALL[3]]),
            changed(8, BOB),
        ],
    )
    assert drawn(remote) == [progress_line(p) for p in INSTALL]
    assert remote.getvalue() == local.getvalue()


def test_a_pull_bar_ignores_installs_and_an_install_bar_ignores_pulls() -> None:
    pulls, installs = io.StringIO(), io.StringIO()
    feed(
        ProgressBar(OLLAMA, MODEL, pulls, node=BOB),
        [changed(1, BOB, installs=[install(50.0)])],
    )
    feed(ProgressBar(OLLAMA, MODEL, pulls), [InstallProgressed(seq=2, progress=install(50.0))])
    feed(ProgressBar(OLLAMA, out=installs, node=BOB), [changed(3, BOB, [pull(50.0)])])
    feed(ProgressBar(OLLAMA, out=installs), [PullProgressed(seq=4, progress=pull(50.0))])
    assert pulls.getvalue() == installs.getvalue() == ""
