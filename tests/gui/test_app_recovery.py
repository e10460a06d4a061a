"""The whole app on a real broker: when the broker dies every screen says so, then fills again."""

from __future__ import annotations

import os
import signal

from app.application import PairApplication
from app.broker.state import ServiceState
from app.pending import PendingKey
from tests.gui.helpers import wait_until
from tests.gui.test_broker_connection import (  # noqa: F401 - the fixture is used by name
    AppFactory,
    make_app,
    wait_for_ready,
)


def _filled(app: PairApplication) -> bool:
    return app.nodes.rowCount() >= 1 and app.engines.rowCount() >= 3


async def test_a_broker_that_dies_empties_every_screen_and_they_fill_again(
    make_app: AppFactory,  # noqa: F811
) -> None:
    app = make_app()
    app.start()
    pid = await wait_for_ready(app)
    await wait_until(lambda: _filled(app), what="this node's card and its engines")
    app.pending.begin(PendingKey("node", "ollama"), "Starting")

    os.kill(pid, signal.SIGKILL)

    await wait_until(
        lambda: (
            app.connection.state is not ServiceState.READY
            and app.nodes.rowCount() == 0
            and app.engines.rowCount() == 0
            and app.jobs.rowCount() == 0
        ),
        what="every screen to drop what the dead broker said",
    )
    assert len(app.pending) == 0  # nothing pending can be confirmed by a dead broker
    await wait_for_ready(app, other_than=pid)  # the app restarts the broker it owns
    await wait_until(lambda: _filled(app), what="the screens to fill again")
