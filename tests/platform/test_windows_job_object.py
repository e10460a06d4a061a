"""Windows' child lifetime for real (``backend/core/lifetime/windows.py``): a child started with
``child_lifetime()``'s command and spawn options and adopted into its kill-on-close Job Object
takes what it starts with it when the tree is killed, when the job's handle is let go of while it
runs, and when the process holding that handle (the broker) dies. The exact kernel32 calls are
tested against a fake in ``tests/unit/core/lifetime/test_windows.py``."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from backend.core.lifetime import ChildTree, Ending, child_lifetime
from backend.core.lifetime.windows import JobTree
from tests.platform.support import kill_all, only_on, still_running
from tests.support.child import REPO_ROOT

pytestmark = [only_on("win32", "Job Objects"), pytest.mark.timeout(90)]

GONE_WITHIN_S = 15.0

# Started adopted: waits for a line (by then it is in the job, so what it starts is too), starts
# a sleeping grandchild with the same output (passed on explicitly: a child started with no
# standard handles named gets none that are pipes), and both say they are up.
GRANDCHILD = "import time; print('grandchild', flush=True); time.sleep(120)"
CHILD = f"""
import subprocess, sys, time
sys.stdin.readline()
subprocess.Popen([sys.executable, "-c", {GRANDCHILD!r}], stdout=sys.stdout)
print("child", flush=True)
time.sleep(120)
"""

# A stand-in broker: starts CHILD through this OS's lifetime, holds the job, lets the child
# start its grandchild, says the child's PID, then sleeps until it is killed. Its assert fails
# it (no PID said) when the child could not be put in a job.
BROKER = f"""
import subprocess, sys, time
from backend.core.lifetime import child_lifetime
lifetime = child_lifetime()
argv = lifetime.command([sys.executable, "-c", {CHILD!r}])
child = subprocess.Popen(argv, stdin=subprocess.PIPE, text=True, **lifetime.spawn_options())
tree = lifetime.adopt(child)
assert tree.job is not None, "no job object"
child.stdin.write("go\\n")
child.stdin.flush()
print(child.pid, flush=True)
time.sleep(120)
"""


def start_adopted() -> tuple[subprocess.Popen[str], ChildTree]:
    """CHILD started and adopted by this process's lifetime, as the broker starts a child."""
    lifetime = child_lifetime()
    argv = lifetime.command([sys.executable, "-c", CHILD])
    child = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **lifetime.spawn_options()
    )
    return child, lifetime.adopt(child)


def family_once_up(child: subprocess.Popen[str]) -> list[psutil.Process]:
    """Let the adopted child start its grandchild; once both say they are up, the child and
    every process under it (a virtual environment's launcher stands between some of them)."""
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("go\n")
    child.stdin.flush()
    said = {child.stdout.readline().strip() for _ in range(2)}
    assert said == {"child", "grandchild"}, said
    parent = psutil.Process(child.pid)
    family = [parent, *parent.children(recursive=True)]
    assert len(family) >= 2, "the grandchild runs under the child"
    return family


def job_handle(tree: JobTree) -> int | None:
    """The job's handle while the tree holds one."""
    return tree.job


def close_pipes(child: subprocess.Popen[str]) -> None:
    for stream in (child.stdin, child.stdout):
        if stream is not None:
            stream.close()


@contextlib.contextmanager
def adopted_family() -> Iterator[tuple[subprocess.Popen[str], ChildTree, list[psutil.Process]]]:
    """CHILD adopted (``start_adopted``) with its grandchild up (``family_once_up``): the child,
    its tree and every process in it; all of them killed and reaped on the way out."""
    child, tree = start_adopted()
    family: list[psutil.Process] = []
    try:
        family = family_once_up(child)
        yield child, tree, family
    finally:
        kill_all(family)
        child.kill()
        child.wait()
        close_pipes(child)


def test_kill_ends_the_child_and_what_it_started_and_the_job_is_let_go_of_after_reaping() -> None:
    with adopted_family() as (child, tree, family):
        assert isinstance(tree, JobTree) and tree.job is not None, "the child is in a job"
        tree.end(Ending.KILL)

        assert still_running(family, GONE_WITHIN_S) == []
        child.wait(GONE_WITHIN_S)
        tree.release()
        assert job_handle(tree) is None
        tree.release()  # a second time: nothing left to close


def test_letting_go_of_the_job_while_the_child_runs_kills_its_whole_tree() -> None:
    with adopted_family() as (_child, tree, family):
        tree.release()  # the last handle on a kill-on-close job

        assert still_running(family, GONE_WITHIN_S) == []


def test_terminate_ends_the_main_process_only() -> None:
    with adopted_family() as (child, tree, family):
        tree.end(Ending.TERMINATE)  # TerminateProcess on the child, as Popen.terminate

        child.wait(GONE_WITHIN_S)
        assert [process.pid for process in still_running(family[1:], 1.0)], "the rest runs on"
        tree.release()  # what is left in the job goes with its handle
        assert still_running(family, GONE_WITHIN_S) == []


def test_the_child_and_its_tree_die_with_the_broker_holding_their_job() -> None:
    # The child and the grandchild write to the broker's output, which is this pipe.
    broker = subprocess.Popen(
        [sys.executable, "-c", BROKER], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    family: list[psutil.Process] = []
    try:
        assert broker.stdout is not None
        said = [broker.stdout.readline().strip() for _ in range(3)]
        child_pid = next(int(line) for line in said if line.isdigit())
        assert {line for line in said if not line.isdigit()} == {"child", "grandchild"}, said
        child = psutil.Process(child_pid)
        family = [child, *child.children(recursive=True)]
        assert len(family) >= 2, "the grandchild runs under the child"

        broker.kill()  # TerminateProcess: the kernel closes the broker's handles, the job's too
        broker.wait(GONE_WITHIN_S)

        assert still_running(family, GONE_WITHIN_S) == [], "the tree outlived its broker"
    finally:
        kill_all(family)
        broker.kill()
        broker.wait()
        if broker.stdout is not None:
            broker.stdout.close()
