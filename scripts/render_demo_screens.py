"""Render every screen of the app on a running `pair demo` cluster to PNG files.

    .venv/bin/python scripts/render_demo_screens.py [--out build/screens] [--warm-up 25]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set. Starts the demo's three
nodes (emulated Ollama and LM Studio, a real llama-server when installed) and its trickle of
requests, attaches the app to the first node with preferences in a temporary folder (so the
first-run welcome shows), waits for the screens to fill, saves one PNG per page, settings tab
and window, then stops the app and every demo process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import qasync  # noqa: E402
from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication, QWidget  # noqa: E402

from app.application import PairApplication  # noqa: E402
from app.broker.state import ServiceState  # noqa: E402
from app.options import AppOptions  # noqa: E402
from app.window.jobs_page import JobsPage  # noqa: E402
from app.window.models_page import ModelsPage  # noqa: E402
from app.window.theme import Appearance  # noqa: E402
from backend.devtools.demo import Demo  # noqa: E402
from backend.devtools.demo_trickle import Trickle  # noqa: E402
from backend.protocol import methods  # noqa: E402
from backend.protocol.types.cluster import InviteCreated, JoinWindowParams  # noqa: E402
from backend.protocol.types.nodes import ManualNodeAdd  # noqa: E402

WINDOW_SIZE = (1100, 720)
READY_TIMEOUT_S = 90.0


async def wait_until(condition: Callable[[], bool], timeout: float = READY_TIMEOUT_S) -> None:
    """Poll ``condition()`` until it holds (it spans widgets and broker processes)."""
    async with asyncio.timeout(timeout):
        while True:
            if condition():
                return
            await asyncio.sleep(0.1)


async def grab(widget: QWidget, path: Path) -> Path:
    """Let layouts settle, then save ``widget`` to ``path``."""
    await asyncio.sleep(0.4)
    if not widget.grab().save(str(path)):
        raise OSError(f"could not write {path}")
    print(f"saved {path}")
    return path


async def everyday_screens(app: PairApplication, out_dir: Path) -> list[Path]:
    """The Playground with a real answer from the cluster, a job's details, the hub's search
    of the demo's emulated Hugging Face, and the Overview and Playground in dark."""
    saved: list[Path] = []
    app.window.show_page("playground")
    form = app.playground_page.form
    await wait_until(lambda: form.model_combo.count() > 0 and form.send_button.isEnabled())
    form.max_tokens_box.setValue(48)
    answers: list[object] = []
    app.playground.answer_ended.connect(answers.append)
    form.send_button.click()
    await wait_until(lambda: bool(answers))
    saved.append(await grab(app.window, out_dir / "demo-playground.png"))
    saved += await job_details_screen(app, out_dir)
    saved += await hub_search_screen(app, out_dir)
    app.theme.set_choice(Appearance.DARK)
    for page in ("overview", "playground"):
        app.window.show_page(page)
        saved.append(await grab(app.window, out_dir / f"demo-{page}-dark.png"))
    app.theme.set_choice(Appearance.SYSTEM)
    return saved


async def job_details_screen(app: PairApplication, out_dir: Path) -> list[Path]:
    """The details of the newest job that went to another computer (else the newest)."""
    app.window.show_page("jobs")
    page = app.window.stack.currentWidget()
    assert isinstance(page, JobsPage)
    rows = app.jobs.rows()
    if not rows:
        return []
    remote = [job for job in rows if job.serving and not app.jobs.is_self(job.serving)]
    dialog = page.open_details((remote or rows)[0])
    await asyncio.sleep(1.0)  # its timeline arrives from the broker
    saved = [await grab(dialog, out_dir / "demo-job-details.png")]
    dialog.close()
    return saved


async def hub_search_screen(app: PairApplication, out_dir: Path) -> list[Path]:
    """The Model hub searching the demo's emulated Hugging Face, a repository's files shown."""
    app.window.show_page("models")
    page = app.window.stack.currentWidget()
    assert isinstance(page, ModelsPage)
    page.tabs.setCurrentWidget(page.hub)
    page.hub.hugging_face_button.click()
    search = page.hub.hugging_face
    search.search.setText("qwen2.5 instruct")
    search.search.returnPressed.emit()  # as Enter does; setText is not an edit
    try:
        await wait_until(lambda: search.results.model().rowCount() > 0, 15.0)
    except TimeoutError:
        return []  # the demo runs its hub only where llama-server is installed
    search.results.selectRow(0)
    await asyncio.sleep(1.0)  # the repository's files arrive
    return [await grab(app.window, out_dir / "demo-hub-search.png")]


async def render(out_dir: Path, warm_up: float) -> list[Path]:
    """Run the demo and the app, save the screens, stop everything; the files written."""
    saved: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="pair-demo-screens-") as temp:
        QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, temp)
        demo = Demo(Path(temp) / "demo", say=lambda line: print(line))
        await demo.start()
        trickle = asyncio.create_task(Trickle(await demo.front_doors(), seed=7).run())
        app = PairApplication(
            AppOptions(demo.entry.data_dir, ()), use_tray=False, open_url=lambda _url: True
        )
        app.window.resize(*WINDOW_SIZE)
        app.start()
        try:
            await wait_until(lambda: app.connection.state is ServiceState.READY)
            await asyncio.sleep(3)
            dialog = app.welcome.dialog
            if dialog is not None and dialog.isVisible():
                saved.append(await grab(dialog, out_dir / "welcome.png"))
                dialog.close()
            await wait_until(lambda: app.nodes.rowCount() >= 3)
            await asyncio.sleep(warm_up)  # charts get history, jobs pile up
            for page in ("overview", "engines", "models", "jobs", "cluster"):
                app.window.show_page(page)
                saved.append(await grab(app.window, out_dir / f"demo-{page}.png"))
            app.window.show_page("settings")
            tabs = app.window.settings_page.tabs
            for index in range(tabs.count()):
                tabs.setCurrentIndex(index)
                name = tabs.tabText(index).lower().replace(" ", "-")
                saved.append(await grab(app.window, out_dir / f"demo-settings-{name}.png"))
            app.endpoints_window.show_and_raise()
            saved.append(await grab(app.endpoints_window, out_dir / "demo-endpoints.png"))
            saved += await everyday_screens(app, out_dir)
            saved += await pairing_screens(app, Path(temp), out_dir)
        finally:
            trickle.cancel()
            await app.shutdown()
            await demo.stop()
    return saved


async def pairing_screens(app: PairApplication, temp: Path, out_dir: Path) -> list[Path]:
    """A fourth computer ("new-mac", its own app and broker) joins through the real flow: the
    Add node dialog lists it, the PIN panel shows the PIN, new-mac's invitee prompt takes it,
    and the Cluster page then lists three members."""
    saved: list[Path] = []
    data_dir = temp / "new-mac"
    data_dir.mkdir()
    (data_dir / "settings.json").write_text('{"node_name": "new-mac"}')
    node_port = _free_port()
    flags = ("--ollama-port", "--openai-port", "--llamacpp-port", "--relay-port")
    args = ("--node-port", str(node_port), *(x for f in flags for x in (f, str(_free_port()))))
    os.environ["PAIR_DISCOVERY_MDNS"] = "0"
    newcomer = PairApplication(AppOptions(data_dir, args), use_tray=False, open_url=lambda _: True)
    newcomer.start()
    try:
        await wait_until(lambda: newcomer.connection.state is ServiceState.READY)
        await asyncio.sleep(1)
        if newcomer.welcome.dialog is not None:
            newcomer.welcome.dialog.close()
        # Its user chose "Join a cluster…": only then does it take invites.
        await newcomer.connection.call(methods.CLUSTER_OPEN_JOIN_WINDOW, JoinWindowParams())
        added = ManualNodeAdd(address="127.0.0.1", port=node_port, name="new-mac")
        await app.connection.call(methods.NODE_ADD, added)
        app.show_add_node()
        dialog = app.add_node_dialog
        await wait_until(lambda: any(c.name == "new-mac" for c in app.add_node.candidates))
        dialog.address_field.setText("192.168.1.")  # what a person may be typing
        await asyncio.sleep(0.3)
        saved.append(await grab(dialog, out_dir / "demo-add-node.png"))
        created: list[InviteCreated] = []
        app.add_node.invite_created.connect(created.append)
        dialog.address_field.setText(f"127.0.0.1:{node_port}")
        dialog.check_button.click()
        await wait_until(dialog.address_invite_button.isEnabled)
        dialog.address_invite_button.click()
        await wait_until(lambda: bool(created))
        await asyncio.sleep(0.5)
        saved.append(await grab(dialog, out_dir / "demo-pin-panel.png"))
        await wait_until(lambda: newcomer.invitee_prompts.prompt is not None)
        prompt = newcomer.invitee_prompts.prompt
        assert prompt is not None
        prompt.pin.paste(created[0].pin[:4])  # half typed, as read off the other screen
        await asyncio.sleep(0.3)
        saved.append(await grab(prompt, out_dir / "demo-invitee-prompt.png"))
        prompt.pin.paste(created[0].pin[4:])
        await wait_until(prompt.join_button.isEnabled)
        prompt.join_button.click()
        await wait_until(lambda: len(app.cluster_store.members()) == 3)
        await asyncio.sleep(1.0)
        saved.append(await grab(dialog, out_dir / "demo-pin-panel-paired.png"))
        dialog.close()
        app.window.show_page("cluster")
        await asyncio.sleep(2.0)  # the new member's link comes up, its engines arrive
        saved.append(await grab(app.window, out_dir / "demo-cluster.png"))
    finally:
        await newcomer.shutdown()
    return saved


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def main() -> int:
    """Parse arguments and render."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "screens")
    parser.add_argument("--warm-up", type=float, default=25.0, help="seconds of demo traffic")
    arguments = parser.parse_args()
    arguments.out.mkdir(parents=True, exist_ok=True)
    qt_app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(qt_app, QApplication)
    qt_app.setQuitOnLastWindowClosed(False)
    with asyncio.Runner(loop_factory=lambda: qasync.QEventLoop(qt_app)) as runner:
        runner.run(render(arguments.out, arguments.warm_up))
    return 0


if __name__ == "__main__":
    sys.exit(main())
