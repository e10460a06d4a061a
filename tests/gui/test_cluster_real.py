"""Two real apps on two real brokers: desk invites laptop through its Add node dialog, laptop
types the PIN into its invitee prompt, both end paired; then desk starts laptop's engine from
its own Engines page, and laptop's broker runs it.

The brokers are real processes (spawned by the apps, on free ports, mDNS off); laptop's Ollama
is PAIR's emulator behind a shim, so starting it starts a real process on laptop's side.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLabel, QWidget

from app.application import PairApplication
from app.broker.state import ServiceState
from app.options import AppOptions
from app.window.engine_card import EngineCard
from backend.protocol import methods
from backend.protocol.types.base import EngineName
from backend.protocol.types.cluster import InviteCreated
from backend.protocol.types.engines import EngineRef, EngineStatus
from tests.gui.conftest import free_port
from tests.gui.helpers import wait_until
from tests.integration.engines.conftest import OLLAMA_SHIM, write_override, write_script

pytestmark = pytest.mark.linux_only("checks the engine's process under /proc")
READY_S = 60.0
AppFactory = Callable[[str], PairApplication]


def _ports() -> tuple[int, tuple[str, ...]]:
    node = free_port()
    others = ("--ollama-port", "--openai-port", "--llamacpp-port", "--relay-port")
    args = ("--node-port", str(node), *(x for flag in others for x in (flag, str(free_port()))))
    return node, args


@pytest.fixture
async def make_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[AppFactory, dict[str, int]]]:
    """Apps, each on its own data dir and broker (spawned by the app); shut down afterwards."""
    monkeypatch.setenv("PAIR_DISCOVERY_MDNS", "0")
    apps: list[PairApplication] = []
    node_ports: dict[str, int] = {}

    def factory(name: str) -> PairApplication:
        data_dir = tmp_path / name
        data_dir.mkdir()
        shim = write_script(tmp_path / f"ollama-{name}", OLLAMA_SHIM)
        runtime = {"port": free_port(), "ready": {"timeout_s": 30}}
        write_override(data_dir, "ollama", {"detect": [{"path": str(shim)}], "runtime": runtime})
        (data_dir / "settings.json").write_text(f'{{"node_name": "{name}"}}')
        node_ports[name], args = _ports()
        app = PairApplication(
            AppOptions(data_dir, args), use_tray=False, open_url=lambda _url: True
        )
        apps.append(app)
        app.start()
        return app

    yield factory, node_ports
    for app in apps:
        await app.shutdown()


async def test_two_apps_pair_through_their_windows_and_one_runs_the_others_engine(
    make_app: tuple[AppFactory, dict[str, int]],
) -> None:
    factory, node_ports = make_app
    desk, laptop = factory("desk"), factory("laptop")
    for app in (desk, laptop):
        await wait_until(lambda app=app: app.connection.state is ServiceState.READY, READY_S)
    await wait_until(lambda: desk.cluster_store.loaded and laptop.cluster_store.loaded)

    # laptop: Cluster page → Join a cluster… (it takes invites only when asked).
    laptop.window.show_page("cluster")
    join_row = laptop.cluster_page.cluster_box.join_row
    await wait_until(join_row.join_button.isEnabled, 20, "the join button")
    QTest.mouseClick(join_row.join_button, Qt.MouseButton.LeftButton)
    await wait_until(join_row.stop_button.isVisible, 20, "the join window to open")

    # desk: Cluster page → Add node… → the address typed, checked, invited.
    desk.window.show_page("cluster")
    desk.cluster_page.add_node_requested.emit()
    dialog = desk.add_node_dialog
    await wait_until(dialog.isVisible)
    created: list[InviteCreated] = []
    desk.add_node.invite_created.connect(created.append)
    dialog.address_field.setText(f"127.0.0.1:{node_ports['laptop']}")
    QTest.mouseClick(dialog.check_button, Qt.MouseButton.LeftButton)
    await wait_until(dialog.address_invite_button.isEnabled, 20, "the probe to answer")
    QTest.mouseClick(dialog.address_invite_button, Qt.MouseButton.LeftButton)
    await wait_until(lambda: bool(created), 20, "the invite to open")
    pin = created[0].pin
    assert len(pin) == 6
    assert pin[:3] in dialog.panel.pin_label.text() and pin[3:] in dialog.panel.pin_label.text()

    # laptop: the prompt opens by itself; the PIN typed digit by digit, then Join.
    await wait_until(lambda: laptop.invitee_prompts.prompt is not None, 20, "the prompt")
    prompt = laptop.invitee_prompts.prompt
    assert prompt is not None and "desk" in _texts(prompt)
    for box, digit in zip(prompt.pin.boxes, pin, strict=True):
        QTest.keyClick(box, digit)
    await wait_until(prompt.join_button.isEnabled)
    QTest.mouseClick(prompt.join_button, Qt.MouseButton.LeftButton)

    def members(app: PairApplication) -> list[str]:
        status = app.cluster_store.status
        return [m.name for m in status.members] if status is not None else []

    await wait_until(lambda: members(desk) == ["laptop"] and members(laptop) == ["desk"], 30)
    await wait_until(lambda: "Paired with laptop" in _texts(dialog.panel), 10)
    await wait_until(lambda: desk.members.rowCount() == 1, 10, "the members table")

    # desk's Engines page: laptop's Ollama card, switched on from desk.
    desk.window.show_page("engines")
    laptop_id = laptop.cluster_store.status.node_id  # type: ignore[union-attr]

    def laptop_card() -> EngineCard | None:
        cards = desk.window.findChildren(EngineCard)
        found = [c for c in cards if c.row.node_id == laptop_id and c.row.engine == "ollama"]
        return found[0] if found and found[0].switch.isVisible() else None

    await wait_until(lambda: laptop_card() is not None, 40, "laptop's card to be manageable")
    card = laptop_card()
    assert card is not None and card.row.member and not card.row.local
    QTest.mouseClick(card.switch, Qt.MouseButton.LeftButton)

    async with asyncio.timeout(40):  # laptop's own broker says its engine runs, as desk asked
        while (status := await laptop_engine(laptop)).state != "running":
            await asyncio.sleep(0.1)
    assert status.desired is True and status.pid is not None
    assert Path(f"/proc/{status.pid}").exists()  # noqa: ASYNC240 - one stat
    await wait_until(lambda: (c := laptop_card()) is not None and c.row.state == "running", 20)


async def laptop_engine(app: PairApplication) -> EngineStatus:
    """The engine's status as its own broker tells it."""
    return await app.connection.call(methods.ENGINE_STATUS, EngineRef(engine=EngineName("ollama")))


def _texts(widget: QWidget) -> str:
    """Every label's text under ``widget``."""
    return " ".join(label.text() for label in widget.findChildren(QLabel))
