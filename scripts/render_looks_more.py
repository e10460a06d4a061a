"""Render the Jobs page and a job's details, the Cluster page, the pairing screens, the banners,
the API endpoints window, About and the main window's sidebar in light and dark.

    .venv/bin/python scripts/render_looks_more.py [--out-dir /tmp/looks-more] [--only light|dark]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set; no broker runs: every page
reads a scripted connection. The data and the windows of ``render_job_details.py`` and
``render_app_shell.py`` are imported, not copied; ``render_looks.py`` gives the contrast check,
which prints every label too faint to read. Each scheme's PNGs go to their own folder.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import msgspec  # noqa: E402
import render_app_shell  # noqa: E402
import render_job_details  # noqa: E402
import render_looks  # noqa: E402
from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.application import PairApplication  # noqa: E402
from app.controllers.cluster_page import ClusterPageController  # noqa: E402
from app.controllers.invitee import InviteeController  # noqa: E402
from app.controllers.jobs import JobsController  # noqa: E402
from app.controllers.service import ServiceController  # noqa: E402
from app.models.jobs import JobsModel  # noqa: E402
from app.models.members import ApiKeysModel, MembersModel  # noqa: E402
from app.options import AppOptions  # noqa: E402
from app.stores.cluster import ClusterStore  # noqa: E402
from app.stores.discovery import DiscoveryStore  # noqa: E402
from app.stores.engines import EnginesStore  # noqa: E402
from app.stores.jobs import JobsStore  # noqa: E402
from app.stores.settings import SettingsStore  # noqa: E402
from app.window.about_dialog import AboutDialog  # noqa: E402
from app.window.add_node_dialog import AddNodeDialog  # noqa: E402
from app.window.cluster_dialogs import Prompts  # noqa: E402
from app.window.cluster_page import ClusterPage  # noqa: E402
from app.window.invitee_prompt import InviteePrompt  # noqa: E402
from app.window.jobs_page import JobsPage  # noqa: E402
from app.window.main_window import MINIMUM_SIZE  # noqa: E402
from app.window.theme import Appearance  # noqa: E402
from backend.protocol import methods  # noqa: E402
from backend.protocol.types.base import NodeId  # noqa: E402
from backend.protocol.types.cluster import Invite  # noqa: E402
from tests.fakes import FakeClock  # noqa: E402
from tests.gui.add_node_rig import build_rig, created, node, status  # noqa: E402
from tests.gui.helpers import NO_MODELS, FakeConnection, settle, wait_until  # noqa: E402

SCHEMES = render_looks.SCHEMES
PAGE_SIZE = (1000, 640)
NOW = render_job_details.NOW
SELF, GPU = render_job_details.SELF, render_job_details.GPU
FINGERPRINT = "sha256:" + "0123456789abcdef" * 4
save = render_looks.save


def job_dicts() -> list[dict[str, Any]]:
    """The details script's jobs (completed, failed over, refused, running) as wire dicts."""
    record = render_job_details.record
    running = record(55, state="running", completed_at=None, attempt=3, model="qwen3:14b")
    waiting = record(58, state="in_flight", started_at=None, completed_at=None, target=None)
    stopped = record(30, state="cancelled", error="the client went away")
    jobs = [record(12), stopped, render_job_details.failed_over().job]
    jobs += [render_job_details.refused().job, running, waiting]
    return [msgspec.to_builtins(job) for job in jobs]


def here(node_id: str, name: str) -> dict[str, Any]:
    """A discovered PAIR node."""
    return {"node_id": node_id, "name": name, "kind": "pair", "sources": ["mdns"],
            "addresses": ["192.168.1.5"], "ports": {}, "engines": {}, "reachable": True,
            "last_seen": NOW - 30}  # fmt: skip


async def render_jobs(out_dir: Path, settings_dir: Path) -> None:
    """The Jobs page with jobs in every state, filtered to nothing, and empty; and the details
    of a job that failed over and one refused."""
    connection = FakeConnection()
    model = JobsModel(now=lambda: NOW, tick_ms=60_000)
    jobs_store, discovery = JobsStore(connection), DiscoveryStore(connection)
    controller = JobsController(connection, model, jobs_store, discovery)
    settings = QSettings(str(settings_dir / "jobs.ini"), QSettings.Format.IniFormat)
    page = JobsPage(controller, settings)
    page.resize(*PAGE_SIZE)
    page.show()
    try:
        connection.script(methods.JOBS_SUBSCRIBE, {"seq": 10, "workloads": []})
        nodes = [here(SELF, "workstation"), here(GPU, "gpu-box")]
        connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 4, "nodes": nodes})
        connection.become_ready()
        await settle()
        save(page, out_dir / "jobs-empty.png")
        connection.lose_session()
        connection.script(methods.JOBS_SUBSCRIBE, {"seq": 10, "workloads": job_dicts()})
        connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 4, "nodes": nodes})
        connection.become_ready()
        await wait_until(lambda: model.rowCount() == len(job_dicts()))
        page.table.selectRow(2)
        save(page, out_dir / "jobs.png")
        page.filter_bar.search_field.setText("no such model")
        await settle()
        save(page, out_dir / "jobs-filtered-empty.png")
        page.empty_state.show_all_button.click()
    finally:
        page.close()
        for closing in (controller, jobs_store, discovery):
            await closing.close()
        await connection.stop()
    render_job_details.render_dialog(render_job_details.failed_over(), out_dir / "job.png")
    render_job_details.render_dialog(render_job_details.refused(), out_dir / "job-refused.png")
    render_job_details.render_list(out_dir / "jobs-chips.png")


def member(node_id: str, name: str, state: str = "online") -> dict[str, Any]:
    """A cluster member as the broker sends it."""
    return {"node_id": node_id, "name": name, "fingerprint": "sha256:" + node_id.ljust(64, "0"),
            "address": "192.168.1.20", "node_port": 14320, "added_by": "n-self",
            "added_at": NOW - 3 * 86400, "state": state}  # fmt: skip


def cluster(*members: dict[str, Any], cluster_id: str | None = "c-1") -> dict[str, Any]:
    """This computer's cluster status."""
    return {"node_id": "n-self", "fingerprint": FINGERPRINT, "key_protection": "keyring",
            "cluster_id": cluster_id, "cluster_name": "Home lab" if cluster_id else "",
            "members": list(members), "invites": []}  # fmt: skip


REMOVE_FAILED = "Could not remove nas: it did not answer."
MEMBERS = cluster(
    member("n-atlas", "atlas"),
    member("n-nas", "nas", "offline"),
    member("n-mac", "new-mac", "provisional"),
)


async def render_cluster(
    out_dir: Path, name: str, status_now: dict[str, Any], failure: str = ""
) -> None:
    """The Cluster page for ``status_now`` with LAN access on and one key (and ``failure``
    under the members' buttons)."""
    connection = FakeConnection()
    stores = (ClusterStore(connection), EnginesStore(connection), DiscoveryStore(connection))
    settings = SettingsStore(connection)
    controller = ClusterPageController(
        connection, MembersModel(), ApiKeysModel(), *stores, settings,
        clock=FakeClock(NOW), interfaces=lambda: ["10.0.0.7"],
    )  # fmt: skip
    page = ClusterPage(connection, controller, Prompts())
    page.resize(PAGE_SIZE[0], 1100)
    page.show()
    spec = {"key": "lan_access", "type": "bool", "default": False, "description": "d"}
    keys = [{"id": "k1", "name": "laptop", "prefix": "pair-AbCd", "created_at": NOW - 86400}]
    try:
        connection.script(methods.CLUSTER_SUBSCRIBE, {"seq": 1, "status": status_now})
        connection.script(
            methods.ENGINE_SUBSCRIBE,
            {"seq": 1, "engines": [], "models": NO_MODELS, "members": []},
        )
        connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 1, "nodes": []})
        connection.script(methods.SETTINGS_GET, {"values": {"lan_access": True}, "schema": [spec]})
        connection.script(methods.APIKEYS_LIST, keys)
        connection.become_ready()
        await wait_until(lambda: controller.status is not None, 5, "the cluster")
        await wait_until(lambda: controller.lan_access is not None, 5, "the settings")
        await settle()
        if failure:
            page.cluster_box.notice.warn(failure)
        save(page, out_dir / name)
    finally:
        page.close()
        for closing in (controller, *stores, settings):
            await closing.close()
        await connection.stop()


async def render_pairing(out_dir: Path) -> None:
    """Add node (a list and a typed address that failed its check), its PIN panel waiting and
    then declined."""
    rig = build_rig()
    await rig.start([node("n-laptop", "laptop", "192.168.1.30")], status())
    dialog = AddNodeDialog(rig.controller, clock=rig.clock)
    dialog.show()
    try:
        dialog.address_field.setText("gpu-box:0")
        save(dialog, out_dir / "add-node.png")
        rig.connection.script(methods.CLUSTER_INVITE, created())
        dialog.rows[NodeId("n-laptop")].invite_button.click()
        await wait_until(lambda: dialog.panel.invite is not None)
        save(dialog, out_dir / "pin-panel.png")
        invite = msgspec.to_builtins(dialog.panel.invite)
        rig.push_invite({**invite, "state": "declined"})
        await wait_until(lambda: dialog.panel.ended)
        save(dialog, out_dir / "pin-panel-declined.png")
    finally:
        dialog.close()
        await rig.close()


async def render_invitee(out_dir: Path) -> None:
    """The invitee's prompt: a PIN refused, then paired."""
    connection = FakeConnection()
    store = ClusterStore(connection)
    controller = InviteeController(connection, store)
    raw = {"id": "inv-1", "direction": "incoming", "peer_node_id": "node-ada", "peer_name": "ada",
           "peer_address": "192.168.1.20", "peer_fingerprint": FINGERPRINT,
           "created_at": NOW - 10, "expires_at": NOW + 290, "state": "pending"}  # fmt: skip
    prompt = InviteePrompt(controller, msgspec.convert(raw, Invite), FakeClock(NOW))
    prompt.show()
    try:
        wrong = "That PIN is not the one shown on ada. Check it and type it again."
        controller.answer_failed.emit("inv-1", wrong)
        await settle()
        save(prompt, out_dir / "invitee-refused.png")
        controller.invite_updated.emit(msgspec.convert({**raw, "state": "paired"}, Invite))
        await settle()
        save(prompt, out_dir / "invitee-paired.png")
    finally:
        prompt.close()
        await controller.close()
        await store.close()
        await connection.stop()


async def render_about(out_dir: Path, data_dir: Path) -> None:
    """About PAIR, the service ready."""
    connection = FakeConnection()
    settings = SettingsStore(connection)
    service = ServiceController(connection, settings, data_dir, lambda _url: True)
    dialog = AboutDialog(connection, service, version="1.2.3", commit="1a2b3c4")
    dialog.show()
    try:
        connection.become_ready()
        await settle()
        save(dialog, out_dir / "about.png")
    finally:
        dialog.close()
        await service.close()
        await settings.close()
        await connection.stop()


async def render_sidebar(out_dir: Path, data_dir: Path) -> None:
    """The main window (its sidebar and status line) on the Jobs and Cluster pages, no service
    running."""
    palette = QApplication.palette()
    app = PairApplication(AppOptions(data_dir), use_tray=False, open_url=lambda _url: True)
    QApplication.setPalette(palette)  # the app follows its stored choice: keep this scheme's
    window = app.window
    window.resize(MINIMUM_SIZE)
    window.show()
    try:
        for name in ("jobs", "cluster"):
            window.show_page(name)
            await settle()
            save(window, out_dir / f"window-{name}.png")
    finally:
        await app.shutdown()
        QApplication.setPalette(palette)


async def render_scheme(out_dir: Path, temp: Path) -> None:
    """Every window of this script in the palette in use now."""
    steps: list[Callable[[], Awaitable[None]]] = [
        lambda: render_jobs(out_dir, temp),
        lambda: render_cluster(out_dir, "cluster.png", MEMBERS, REMOVE_FAILED),
        lambda: render_cluster(out_dir, "cluster-empty.png", cluster(cluster_id=None)),
        lambda: render_pairing(out_dir),
        lambda: render_invitee(out_dir),
        lambda: render_app_shell.render_banners(out_dir),
        lambda: render_app_shell.render_endpoints(out_dir),
        lambda: render_about(out_dir, temp / "about"),
        lambda: render_sidebar(out_dir, temp / "app"),
    ]
    for step in steps:
        await step()
    render_app_shell.render_key_dialog(out_dir)


async def render_all(out_dir: Path, schemes: tuple[Appearance, ...]) -> None:
    """Every window in every scheme, each scheme in its own folder."""

    async def render_in_temp(folder: Path) -> None:
        with tempfile.TemporaryDirectory() as temp:
            await render_scheme(folder, Path(temp))

    await render_looks.in_each_scheme(out_dir, schemes, render_in_temp)


def main() -> int:
    """Parse arguments and render."""
    description = __doc__.splitlines()[0] if __doc__ else None
    return render_looks.run_schemes(description, Path("/tmp/looks-more"), render_all)


if __name__ == "__main__":
    sys.exit(main())
