"""How the connection treats brokers that misbehave, using tiny stand-in executables."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from app.broker.connection import BrokerConnection
from app.broker.launch import BrokerLaunch
from app.broker.restart_policy import RestartPolicy
from app.broker.state import ServiceState
from tests.gui.helpers import wait_until

ConnectionFactory = Callable[[str], BrokerConnection]


@pytest.fixture
async def make_connection(data_dir: Path) -> AsyncIterator[ConnectionFactory]:
    """Connections whose "python" is a shell script standing in for the broker."""
    made: list[BrokerConnection] = []

    def factory(script: str) -> BrokerConnection:
        path = data_dir.parent / f"fake-broker-{len(made)}"
        path.write_text(f"#!/bin/sh\n{script}\n")
        path.chmod(0o755)
        launch = BrokerLaunch(data_dir, python=str(path))
        connection = BrokerConnection(
            launch, RestartPolicy(), retry_interval=0.2, restart_delay=0.05, startup_timeout=1.0
        )
        made.append(connection)
        connection.start()
        return connection

    yield factory
    for connection in made:
        await connection.stop()


def states_of(connection: BrokerConnection) -> list[ServiceState]:
    states = [connection.state]
    connection.state_changed.connect(states.append)
    return states


async def test_a_broker_that_cannot_start_fails_with_its_message(
    make_connection: ConnectionFactory,
) -> None:
    connection = make_connection('echo "pair node: cannot start: disk full" >&2; exit 1')
    await wait_until(lambda: connection.state is ServiceState.FAILED, 20.0)
    assert "exited with code 1" in connection.failure_message
    assert "disk full" in connection.failure_message


async def test_a_missing_interpreter_fails_at_once(data_dir: Path) -> None:
    connection = BrokerConnection(BrokerLaunch(data_dir, python=str(data_dir / "no-python")))
    connection.start()
    try:
        await wait_until(lambda: connection.state is ServiceState.FAILED, 10.0)
        assert connection.failure_message.startswith("Could not start the service")
    finally:
        await connection.stop()


async def test_a_broker_stopped_by_someone_else_is_disconnected_not_restarted(
    make_connection: ConnectionFactory,
) -> None:
    connection = make_connection("exit 0")
    await wait_until(lambda: connection.state is ServiceState.DISCONNECTED, 10.0)
    assert "another program" in connection.failure_message


async def test_a_broker_that_never_gets_ready_is_killed_and_counted_as_a_crash(
    make_connection: ConnectionFactory,
) -> None:
    connection = make_connection("exec sleep 30")
    states = states_of(connection)
    await wait_until(lambda: connection.state is ServiceState.FAILED, 30.0)
    assert "did not get ready in time" in connection.failure_message
    assert ServiceState.READY not in states


async def test_start_after_failure_tries_again(make_connection: ConnectionFactory) -> None:
    connection = make_connection("exit 1")
    await wait_until(lambda: connection.state is ServiceState.FAILED, 20.0)
    states = states_of(connection)
    connection.request_start()
    await wait_until(lambda: ServiceState.CONNECTING in states, 10.0)
    await wait_until(lambda: connection.state is ServiceState.FAILED, 20.0)
