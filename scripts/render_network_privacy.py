"""Render the Cluster page's LAN access and Network privacy boxes to PNGs, against a scripted
connection.

    .venv/bin/python scripts/render_network_privacy.py [--out-dir /tmp/network-privacy]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set; no broker runs. The page
is built as the composition root builds it (stores, models, controller, page) on a connection
whose answers are scripted: this computer is in a cluster with a laptop, LAN access is on and
it announces itself. It saves ``network-privacy.png`` (a home network) and
``network-privacy-public.png`` (after a ``settings_changed`` push turns ``public_network`` on,
the way the broker sends it: the announce and LAN access switches show off, with the reason).
Each PNG shows the two boxes only, cut from the page.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from _offscreen import ScriptedConnection, render_to_out_dir, wait_until
from PySide6.QtCore import QRect

from app.controllers.cluster_page import ClusterPageController
from app.models.members import ApiKeysModel, MembersModel
from app.stores.cluster import ClusterStore
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from app.window.cluster_page import ClusterPage
from backend.protocol import methods

PAGE_SIZE = (900, 1300)
MARGIN = 12
SELF, LAPTOP = "3f6c1a2e-0000-4000-8000-000000000001", "9a1b7c3d-0000-4000-8000-000000000002"
KEYS = ("lan_access", "local_discovery", "public_network")
NO_MODELS: dict[str, Any] = {"models": [], "by_engine": {}, "loaded_by_engine": {}}
DEFAULTS = {"lan_access": False, "local_discovery": True, "public_network": False}


def settings(**values: bool) -> dict[str, Any]:
    """A ``settings:get`` answer holding the three switches' settings."""
    schema = [
        {"key": key, "type": "bool", "default": DEFAULTS[key], "description": key} for key in KEYS
    ]
    return {"values": {**DEFAULTS, **values}, "schema": schema}


def answers() -> dict[str, Any]:
    """What the scripted broker answers: a cluster of two, LAN access on, one key."""
    laptop = {
        "node_id": LAPTOP, "name": "laptop", "fingerprint": "sha256:" + "9a" * 32,
        "address": "192.168.1.23", "node_port": 14320, "added_by": SELF,
        "added_at": 1_750_000_000.0, "state": "online",
    }  # fmt: skip
    cluster = {
        "node_id": SELF, "fingerprint": "sha256:" + "3f" * 32, "key_protection": "keyring",
        "cluster_id": "c-1", "cluster_name": "Home lab", "members": [laptop], "invites": [],
    }  # fmt: skip
    key = {"id": "k1", "name": "phone", "prefix": "pair-AbCd", "created_at": 1_750_000_000.0}
    return {
        methods.CLUSTER_SUBSCRIBE.name: {"seq": 1, "status": cluster},
        methods.ENGINE_SUBSCRIBE.name: {
            "seq": 1,
            "engines": [],
            "members": [],
            "models": NO_MODELS,
        },
        methods.DISCOVERY_SUBSCRIBE.name: {"seq": 1, "nodes": []},
        methods.SETTINGS_GET.name: settings(lan_access=True),
        methods.APIKEYS_LIST.name: [key],
    }


def save_boxes(page: ClusterPage, out: Path) -> None:
    """Save the part of the page from the LAN access box to the end of the privacy box."""
    body = page.widget()
    assert body is not None
    top = page.lan_box.geometry().top() - MARGIN
    bottom = page.privacy_box.geometry().bottom() + MARGIN
    if not body.grab(QRect(0, top, body.width(), bottom - top)).save(str(out)):
        raise OSError(f"could not write {out}")
    print(f"saved {out}")


async def render(out_dir: Path) -> None:
    """Build the page, let the snapshots arrive, save it; push a public network, save again."""
    connection = ScriptedConnection(answers())
    stores = (ClusterStore(connection), EnginesStore(connection), DiscoveryStore(connection))
    settings_store = SettingsStore(connection)
    controller = ClusterPageController(
        connection, MembersModel(), ApiKeysModel(), *stores, settings_store
    )
    page = ClusterPage(connection, controller)
    page.resize(*PAGE_SIZE)
    page.show()
    try:
        connection.become_ready()
        await wait_until(lambda: page.lan_box.switch.isChecked() and controller.keys.rowCount() > 0)
        await asyncio.sleep(0.4)  # layouts settle
        save_boxes(page, out_dir / "network-privacy.png")
        public = settings(lan_access=True, public_network=True)
        connection.push(methods.SETTINGS_CHANGED.name, public)
        await wait_until(lambda: page.privacy_box.public_switch.isChecked())
        await asyncio.sleep(0.4)
        save_boxes(page, out_dir / "network-privacy-public.png")
    finally:
        for closing in (controller, *stores, settings_store):
            await closing.close()
        await connection.stop()


def main() -> int:
    """Parse arguments and render."""
    return render_to_out_dir(__doc__, Path("/tmp/network-privacy"), render)


if __name__ == "__main__":
    sys.exit(main())
