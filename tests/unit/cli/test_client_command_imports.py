"""A client command (``pair status``, ``pair models``, ``pair invite``...) loads the wire types
and the RPC client, not the broker: measured in a fresh interpreter that runs ``python -m
backend ARGS`` against a data dir where no broker runs. People type these commands and the
tests run them hundreds of times; the broker's modules cost most of a second to load."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.cli import exit_codes
from tests.support.child import run_python

# Runs ``python -m backend`` with the given arguments (its output goes to stderr), then prints
# its exit code and the name of every module loaded.
RUN_PAIR = """
import contextlib, runpy, sys
sys.argv = ["pair", *sys.argv[1:]]
try:
    with contextlib.redirect_stdout(sys.stderr):
        runpy.run_module("backend", run_name="__main__", alter_sys=True)
except SystemExit as end:
    print(end.code)
print("\\n".join(sorted(sys.modules)))
"""
# What only a running node needs, by what it is for.
NODE_ONLY = (
    "backend.broker",  # the composition root
    "backend.wiring",
    "backend.wiring_base",
    "backend.wiring_members",
    "backend.core.supervisor",
    "aiohttp",  # the node's HTTP servers and client (a client command uses the control socket)
    "zeroconf",  # discovery on the LAN
    "keyring",  # the broker's secrets store
    "sqlite3",  # the broker's store
    "psutil",  # discovery's interface list (`pair endpoints` and `pair api-key create` only)
)
# Of those, what a node loads only when it first uses it (the keyring: where its key's
# passphrase is kept there); tests/unit/test_worker_imports.py shows it is loaded then.
ON_FIRST_USE = ("keyring",)
# The only module of backend.components a client command loads: plain functions over plain
# data, whose join window bounds ``pair join --minutes`` shows and checks.
PURE_POLICIES = ("backend.components.cluster.admission",)


def _loaded(prefixes: tuple[str, ...], modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def _beyond(policies: tuple[str, ...], modules: list[str]) -> list[str]:
    """The modules of backend.components other than ``policies`` and the packages holding them."""
    return [
        m
        for m in _loaded(("backend.components",), modules)
        if not any(p == m or p.startswith(m + ".") for p in policies)
    ]


def _run_pair(*arguments: str) -> tuple[str, list[str]]:
    code, *modules = run_python(RUN_PAIR, *arguments).stdout.split()
    return code, modules


@pytest.mark.parametrize(
    "command",
    [["status", "--json"], ["models"], ["invite", "192.0.2.7"]],
    ids=["status", "models", "invite"],
)
def test_a_client_command_loads_nothing_of_the_node(command: list[str], tmp_path: Path) -> None:
    code, modules = _run_pair(*command, "--data-dir", str(tmp_path))
    # It ran up to asking the broker (none runs there), with the RPC client loaded for that.
    assert code == str(exit_codes.NOT_RUNNING)
    assert "backend.protocol.peer" in modules
    assert _loaded(NODE_ONLY, modules) == []
    assert _beyond(PURE_POLICIES, modules) == []


def test_the_help_loads_nothing_of_the_node() -> None:
    code, modules = _run_pair("--help")
    assert code == "0"
    assert "backend.cli.commands" in modules
    assert _loaded(NODE_ONLY, modules) == []


def test_a_node_loads_what_a_client_command_leaves_out() -> None:
    # The checks above read real module names: the same names appear where ``pair node`` loads
    # the broker, so a renamed or moved package cannot make them pass by accident.
    script = "import sys, backend.cli.foreground_command; print('\\n'.join(sorted(sys.modules)))"
    modules = run_python(script).stdout.split()
    loaded = {p for p in NODE_ONLY if _loaded((p,), modules)}
    assert loaded == set(NODE_ONLY) - set(ON_FIRST_USE)
    assert len(_beyond(PURE_POLICIES, modules)) > 10
