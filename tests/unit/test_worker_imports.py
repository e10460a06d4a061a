"""The proxy worker's start imports only what serving needs: measured in a fresh interpreter that
starts it the way the broker does (``pair worker proxy``, through ``backend.cli.main``) up to
the point where it would serve. Every module kept out here is memory the idle worker does not
hold (bench/idle_rss.py measures that)."""

from __future__ import annotations

import textwrap

from tests.support.child import run_python

# Runs ``pair worker proxy --help`` (every import of the worker's start, then argparse exits
# before serving) and prints the name of every module loaded.
LOADED_BY_THE_WORKER_START = textwrap.dedent(
    """
    import contextlib
    import io
    import sys
    from backend.cli.main import main
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(["worker", "proxy", "--help"])
    assert "backend.workers.proxy.service" in sys.modules
    print("\\n".join(sorted(sys.modules)))
    """
)
# Packages the worker never uses while it serves, by what they are for.
NOT_FOR_SERVING = (
    "keyring",  # the broker's secrets store
    "PySide6",  # the desktop app
    "qasync",
    "zeroconf",  # discovery on the LAN: the broker's
    "sqlite3",  # the broker's store
    "backend.components",  # the broker's components
    "backend.broker",
    "backend.wiring",
    "backend.devtools",
    "backend.cli.commands",  # the rest of the command line and the client commands
    "backend.cli.client_commands",
    "cProfile",  # only for a worker started with PAIR_PROXY_PROFILE
)


def _loaded(prefixes: tuple[str, ...], modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_the_worker_start_imports_nothing_it_does_not_serve_with() -> None:
    modules = run_python(LOADED_BY_THE_WORKER_START).stdout.split()
    assert _loaded(NOT_FOR_SERVING, modules) == []


def test_the_node_command_loads_what_the_worker_leaves_out() -> None:
    # The check above reads real module names: the same names appear when ``pair node`` loads
    # the broker, so a renamed or moved package cannot make it pass by accident.
    script = "import sys, backend.cli.foreground_command; print('\\n'.join(sorted(sys.modules)))"
    modules = run_python(script).stdout.split()
    loaded = {p for p in NOT_FOR_SERVING if _loaded((p,), modules)}
    assert loaded >= {"zeroconf", "sqlite3", "backend.components", "backend.broker"}


# Imports the node command, then asks the broker's keyring for an entry: prints whether
# ``keyring`` was loaded before and after. keyring's "fail" backend answers, so no OS keyring is
# asked (a developer's desktop would be, and might prompt to unlock it).
KEYRING_ON_FIRST_USE = textwrap.dedent(
    """
    import contextlib
    import os
    import sys
    import backend.cli.foreground_command
    from backend.components.identity.certificate import OS_KEYRING
    os.environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
    before = "keyring" in sys.modules
    with contextlib.suppress(Exception):
        OS_KEYRING.get_password("pair-test-absent", "nobody")
    print(before, "keyring" in sys.modules)
    """
)


def test_the_broker_loads_the_keyring_only_when_it_asks_it_something() -> None:
    # A node whose key is a plain file (PAIR_KEYRING=off, headless) never pays for it.
    assert run_python(KEYRING_ON_FIRST_USE).stdout.split() == ["False", "True"]
