"""The GUI's composition root: builds every part, hands each its dependencies, runs until quit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

import qasync
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QApplication

from app.autostart import for_this_system
from app.broker.connection import BrokerConnection
from app.broker.launch import BrokerLaunch
from app.broker.restart_policy import RestartPolicy
from app.catalog import load_catalog
from app.controllers.activity import ActivityController
from app.controllers.add_node import AddNodeController
from app.controllers.base import Controller
from app.controllers.cluster_page import ClusterPageController
from app.controllers.components import ComponentsController
from app.controllers.endpoints import EndpointsController, FrontDoorSettingsController
from app.controllers.engines import EnginesController
from app.controllers.errors import ErrorsController
from app.controllers.hub import HubController
from app.controllers.inference_check import InferenceCheckController
from app.controllers.invitee import InviteeController
from app.controllers.jobs import JobsController
from app.controllers.models import ModelsController
from app.controllers.nodes import NodesController
from app.controllers.playground import PlaygroundController
from app.controllers.service import ServiceController, UrlOpener
from app.identity import name_application, qt_arguments
from app.models.components import ComponentsModel
from app.models.engines import EnginesModel
from app.models.errors import ErrorsModel
from app.models.jobs import JobsModel
from app.models.members import ApiKeysModel, MembersModel
from app.models.nodes import NodesModel
from app.options import AppOptions
from app.pending import PendingActions
from app.preferences import preferences
from app.quit_when_ready import QuitWhenReady
from app.single_instance import InstanceServer, ask_running_app_to_show, instance_name
from app.stores.base import StreamStore
from app.stores.cluster import ClusterStore
from app.stores.components import ComponentsStore
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.stores.jobs import JobsStore
from app.stores.settings import SettingsStore
from app.tray import Tray, TrayWatch, tray_available
from app.window.about_dialog import AboutDialog
from app.window.add_node_dialog import AddNodeDialog
from app.window.appearance_box import stored_appearance
from app.window.cluster_page import ClusterPage
from app.window.endpoints_window import EndpointsWindow
from app.window.engines_page import EnginesPage
from app.window.inference_check import InferenceCheckBox
from app.window.invitee_prompt import InviteePrompts
from app.window.jobs_page import JobsPage
from app.window.main_window import MainWindow, Page
from app.window.models_page import ModelsPage
from app.window.overview_page import OverviewPage
from app.window.playground_page import PlaygroundPage
from app.window.settings_general import GeneralSettings, minimise_to_tray
from app.window.theme import ThemeFollower
from app.window.welcome import Welcome
from backend.common import buildinfo

log = logging.getLogger(__name__)


class PairApplication:
    """One GUI process: the broker connection, one store per numbered stream and one for the
    settings, models, controllers, main window and tray.

    Owns all of them; ``shutdown`` stops a broker this app started and leaves an attached one.
    """

    def __init__(
        self,
        options: AppOptions,
        *,
        use_tray: bool | None = None,
        tray_check: Callable[[], bool] = tray_available,
        open_url: UrlOpener = QDesktopServices.openUrl,
        restart_policy: RestartPolicy | None = None,
    ) -> None:
        launch = BrokerLaunch(options.data_dir, options.broker_args)
        self.connection = connection = BrokerConnection(launch, restart_policy)
        self.discovery_store = discovery = DiscoveryStore(connection)
        self.engines_store = engines = EnginesStore(connection)
        self.jobs_store = jobs_store = JobsStore(connection)
        self.components_store = ComponentsStore(connection)
        self.cluster_store = ClusterStore(connection)
        self.settings_store = settings = SettingsStore(connection)
        self.components = ComponentsModel()
        self.errors = ErrorsModel()
        self.components_controller = ComponentsController(
            connection, self.components, self.components_store
        )
        self.errors_controller = ErrorsController(
            connection,
            self.errors,
            self.components_controller,
            engines=engines,
            discovery=discovery,
        )
        self.service = ServiceController(connection, settings, options.data_dir, open_url)
        self.nodes = NodesModel()
        self.nodes_controller = NodesController(connection, self.nodes, discovery, engines)
        self.pending = PendingActions()
        self.engines = EnginesModel()
        self.engines_controller = EnginesController(
            connection, self.engines, self.pending, engines, discovery, settings
        )
        self.models_controller = ModelsController(connection, self.pending, engines, discovery)
        self.hub_controller = HubController(self.models_controller, self.nodes)
        self.jobs = JobsModel()
        self.jobs_controller = JobsController(
            connection, self.jobs, jobs_store, discovery, engines=engines
        )
        self.members = MembersModel()
        self.api_keys = ApiKeysModel()
        self.cluster_controller = ClusterPageController(
            connection,
            self.members,
            self.api_keys,
            self.cluster_store,
            engines,
            discovery,
            settings,
        )
        self.add_node = AddNodeController(connection, discovery, self.cluster_store)
        self.invitee = InviteeController(connection, self.cluster_store)
        self.settings = preferences()
        qt_app = QApplication.instance()
        assert isinstance(qt_app, QApplication)
        self.theme = ThemeFollower(qt_app, stored_appearance(self.settings))
        self.activity = ActivityController(connection, self.errors, jobs_store, engines)
        self.endpoints = EndpointsController(connection, engines, settings, discovery=discovery)
        self.front_door_settings = FrontDoorSettingsController(connection, settings)
        self.playground = PlaygroundController(self.endpoints, engines, self.cluster_store)
        self.inference_check = InferenceCheckController(self.endpoints, engines, self.cluster_store)
        self.cluster_page = ClusterPage(connection, self.cluster_controller)
        self.catalog = load_catalog()
        self.playground_page = PlaygroundPage(self.playground, self.inference_check)
        with_tray = tray_check() if use_tray is None else use_tray
        self.tray = Tray(self.connection, self.service, self.activity) if with_tray else None
        # Without a tray now, the desktop's panel may still be starting: watch for it.
        self.tray_watch = TrayWatch(tray_check) if use_tray is None and not with_tray else None
        self.general_settings = GeneralSettings(
            self.front_door_settings,
            for_this_system(),
            self.settings,
            tray_available=self.tray is not None,
            endpoints=self.endpoints,
        )
        self.general_settings.appearance_box.changed.connect(self.theme.set_choice)
        self.window = MainWindow(
            self.connection,
            self.service,
            self.components,
            self.errors,
            self.errors_controller,
            hide_on_close=self.tray is not None and minimise_to_tray(self.settings),
            pages=[
                Page(
                    "overview",
                    "Overview",
                    OverviewPage(
                        self.connection,
                        self.nodes,
                        add_computer=self.show_add_node,
                        open_service=lambda: self.window.show_page("settings"),
                    ),
                ),
                Page(
                    "engines",
                    "Engines",
                    EnginesPage(
                        self.connection, self.engines, self.engines_controller, nodes=self.nodes
                    ),
                ),
                Page(
                    "models",
                    "Models",
                    ModelsPage(self.models_controller, self.catalog, self.hub_controller),
                ),
                Page("playground", "Playground", self.playground_page),
                Page("jobs", "Jobs", JobsPage(self.jobs_controller, self.settings)),
                Page("cluster", "Cluster", self.cluster_page),
            ],
            settings_tabs=[("General", self.general_settings)],
        )
        self.window.service_page.add_check_widget(InferenceCheckBox(self.inference_check))
        self.endpoints_window = EndpointsWindow(self.endpoints)
        self.add_node_dialog = AddNodeDialog(self.add_node, parent=self.window)
        self.about_dialog: AboutDialog | None = None  # made when first asked for
        self.invitee_prompts = InviteePrompts(self.invitee, self.window, self.tray)
        self.welcome = Welcome(
            self.connection,
            self.activity,
            self.endpoints,
            self.settings,
            self.window,
            models=self.models_controller,
            nodes=self.nodes,
            catalog=self.catalog,
            open_playground=self.try_model,
            demo=self.service.demo,
        )
        self._quit = asyncio.Event()
        self._connect_signals()
        self.quit_when_ready = (
            QuitWhenReady(self.connection, self.window, self.request_quit)
            if options.quit_when_ready
            else None
        )

    def _connect_signals(self) -> None:
        self.window.quit_requested.connect(self.request_quit)
        for controller in self._controllers():
            controller.command_failed.connect(self.window.show_status_message)
        self.general_settings.minimise_to_tray_changed.connect(self._on_minimise_to_tray_changed)
        self.window.endpoints_requested.connect(self.endpoints_window.show_and_raise)
        self.window.about_requested.connect(self.show_about)
        self.cluster_page.add_node_requested.connect(self.show_add_node)
        if self.tray is not None:
            self._connect_tray(self.tray)
        if self.tray_watch is not None:
            self.tray_watch.appeared.connect(self._on_tray_watch_appeared)

    def _connect_tray(self, tray: Tray) -> None:
        tray.show_requested.connect(self.show_window)
        tray.quit_requested.connect(self.request_quit)
        tray.endpoints_requested.connect(self.endpoints_window.show_and_raise)
        tray.about_requested.connect(self.show_about)

    def _on_tray_watch_appeared(self) -> None:
        if self.tray is not None:
            return
        log.info("the desktop's system tray appeared; adding the tray icon")
        self.tray = Tray(self.connection, self.service, self.activity)
        self._connect_tray(self.tray)
        self.tray.show()
        self.window.hide_on_close = minimise_to_tray(self.settings)
        self.general_settings.startup_box.set_tray_available(True)

    def _on_minimise_to_tray_changed(self, on: bool) -> None:
        self.window.hide_on_close = on and self.tray is not None

    def _controllers(self) -> tuple[Controller, ...]:
        return (
            self.service,
            self.errors_controller,
            self.components_controller,
            self.nodes_controller,
            self.jobs_controller,
            self.engines_controller,
            self.models_controller,
            self.hub_controller,
            self.activity,
            self.endpoints,
            self.front_door_settings,
            self.cluster_controller,
            self.add_node,
            self.invitee,
        )

    def _stores(self) -> tuple[StreamStore[Any, Any, Any], ...]:
        return (
            self.discovery_store,
            self.engines_store,
            self.jobs_store,
            self.components_store,
            self.cluster_store,
        )

    def start(self) -> None:
        """Start supervising the broker and show the window (event loop running)."""
        self.connection.start()
        if self.tray is not None:
            self.tray.show()
        if self.tray_watch is not None:
            self.tray_watch.start()
        self.window.show()

    def show_window(self) -> None:
        """Bring the main window to the front."""
        self.window.showNormal()
        self.window.raise_()
        self.window.activateWindow()

    def try_model(self, model: str) -> None:
        """Show the Playground page with ``model`` picked."""
        self.playground_page.select_model(model)
        self.window.show_page("playground")
        self.show_window()

    def show_add_node(self) -> None:
        """Open the Add node dialog (the one dialog, shown again)."""
        self.add_node_dialog.show()
        self.add_node_dialog.raise_()
        self.add_node_dialog.activateWindow()

    def show_about(self) -> None:
        """Open the About box (made on first use, so git is asked for the commit only then)."""
        if self.about_dialog is None:
            self.about_dialog = AboutDialog(
                self.connection,
                self.service,
                version=buildinfo.VERSION,
                commit=buildinfo.commit(),
                parent=self.window,
            )
        self.about_dialog.show_and_raise()

    def request_quit(self) -> None:
        """Ask ``run`` to shut down and return."""
        self._quit.set()

    async def shutdown(self) -> None:
        """Hide the UI, stop the controllers, then leave or stop the broker (bounded)."""
        if self.tray_watch is not None:
            self.tray_watch.stop()
        if self.tray is not None:
            self.tray.hide()
        self.window.hide()
        self.endpoints_window.hide()
        self.add_node_dialog.hide()
        if self.about_dialog is not None:
            self.about_dialog.hide()
        self.invitee_prompts.close_all()
        if self.welcome.dialog is not None:
            self.welcome.dialog.hide()
        for controller in self._controllers():
            await controller.close()
        await self.playground.close()
        await self.inference_check.close()
        await self.window.service_page.close_tasks()
        for store in self._stores():
            await store.close()
        await self.settings_store.close()
        await self.connection.stop()

    async def run(self) -> int:
        """Run until a quit request (window, tray, SIGINT or SIGTERM); return the exit code."""
        self.start()
        with _quit_on_signals(self.request_quit):
            await self._quit.wait()
        await self.shutdown()
        return 0


@contextlib.contextmanager
def _quit_on_signals(request_quit: Callable[[], None]) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if sys.platform != "win32":
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, request_quit)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def run(options: AppOptions) -> int:
    """Build the QApplication and the qasync loop, run ``PairApplication`` until it quits; when
    an app for the same data dir already runs, ask it to show its window and return 0."""
    qt_app = QApplication.instance() or QApplication(qt_arguments())
    assert isinstance(qt_app, QApplication)
    name_application(qt_app)
    name = instance_name(options.data_dir)
    if ask_running_app_to_show(name):
        print(
            f"PAIR is already running for {options.data_dir}; its window was brought forward.",
            file=sys.stderr,
        )
        return 0
    instance = InstanceServer()
    if not instance.listen(name):
        log.warning("cannot listen at %s; a second launch will open another window", name)
    # The tray keeps the app alive with no window; quitting goes through request_quit.
    qt_app.setQuitOnLastWindowClosed(False)
    with asyncio.Runner(loop_factory=lambda: qasync.QEventLoop(qt_app)) as runner:
        try:
            return runner.run(_run_app(options, instance))
        finally:
            instance.close()


async def _run_app(options: AppOptions, instance: InstanceServer) -> int:
    app = PairApplication(options)
    instance.show_requested.connect(app.show_window)
    return await app.run()
