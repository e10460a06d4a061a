"""The look of Jobs, Cluster, pairing, banners, endpoints, About and the window's sidebar: one
state colour for one meaning on every page, light and dark shades that follow the palette, and
every label readable in both schemes."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.broker.state import ServiceState
from app.controllers.activity import OverallStatus
from app.icons import state_icon
from app.models.errors import SEVERITY_COLOURS
from app.models.job_text import JobColumn
from app.models.jobs import JOB_STATES, JobsModel, job_state_colour
from app.models.members import MEMBER_STATES
from app.tray import DOT_STATES, status_icon
from app.window.banners import Banner
from app.window.cluster_parts import Notice
from app.window.jobs_filters import JobsFilterBar, chip_style
from app.window.jobs_page import JobsEmptyState
from app.window.look import STATE_LOOKS, STATE_SHADES, State, state_colour
from app.window.theme import Appearance, dark_palette
from app.window.widgets import EmptyState, tinted_state
from tests.gui.looks_grabs import watch_grabs
from tests.gui.test_jobs import record
from tests.gui.window_rig import window_rig

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

render_looks = importlib.import_module("render_looks")  # scripts, not a package
render_looks_more = importlib.import_module("render_looks_more")

WINDOWS = {
    "JobsPage",
    "JobDetailsDialog",
    "ClusterPage",
    "AddNodeDialog",
    "InviteePrompt",
    "ErrorBanners",
    "EndpointsWindow",
    "AboutDialog",
    "MainWindow",
    "SecretDialog",
}


@pytest.fixture
def app(qapp: QApplication) -> Iterator[QApplication]:
    yield qapp
    qapp.setPalette(QPalette())  # the platform's palette again for the tests after this one


def light(qapp: QApplication) -> None:
    qapp.setPalette(qapp.style().standardPalette())


def test_one_meaning_has_one_colour_on_every_page(app: QApplication) -> None:
    for dark in (False, True):
        app.setPalette(dark_palette() if dark else app.style().standardPalette())
        meanings = {
            State.OK: [
                job_state_colour("completed"),
                state_colour(MEMBER_STATES["online"]),
                STATE_LOOKS[ServiceState.READY].colour,
                state_colour(DOT_STATES[OverallStatus.READY]),
            ],
            State.ERROR: [
                job_state_colour("failed"),
                state_colour(MEMBER_STATES["unreachable"]),
                STATE_LOOKS[ServiceState.FAILED].colour,
                SEVERITY_COLOURS["error"],
            ],
            State.PENDING: [
                job_state_colour("in_flight"),
                state_colour(MEMBER_STATES["provisional"]),
                STATE_LOOKS[ServiceState.CONNECTING].colour,
            ],
            State.IDLE: [
                job_state_colour("cancelled"),
                state_colour(MEMBER_STATES["offline"]),
                STATE_LOOKS[ServiceState.DISCONNECTED].colour,
                state_colour(DOT_STATES[OverallStatus.STOPPED]),
            ],
        }
        for state, colours in meanings.items():
            assert {colour.name() for colour in colours} == {STATE_SHADES[state].pick(dark).name()}
    assert set(JOB_STATES) == {"in_flight", "running", "completed", "failed", "cancelled"}


def test_a_failed_job_and_its_dot_take_the_dark_shade_on_a_dark_palette(
    app: QApplication,
) -> None:
    model = JobsModel()
    model.reset([record(1, "failed")])
    index = model.index(0, JobColumn.STATE)
    light(app)
    assert index.data(Qt.ItemDataRole.ForegroundRole) == QColor(STATE_SHADES[State.ERROR].light)
    light_dot = index.data(Qt.ItemDataRole.DecorationRole).pixmap(32, 32).toImage()
    app.setPalette(dark_palette())
    assert index.data(Qt.ItemDataRole.ForegroundRole) == QColor(STATE_SHADES[State.ERROR].dark)
    dark_dot = index.data(Qt.ItemDataRole.DecorationRole).pixmap(32, 32).toImage()
    assert light_dot.pixelColor(16, 16) == QColor(STATE_SHADES[State.ERROR].light)
    assert dark_dot.pixelColor(16, 16) == QColor(STATE_SHADES[State.ERROR].dark)


def test_service_colours_read_the_palette_in_use_so_pages_of_others_follow_it(
    app: QApplication,
) -> None:
    light(app)
    assert SEVERITY_COLOURS["warning"] == QColor(STATE_SHADES[State.WARN].light)
    app.setPalette(dark_palette())
    assert SEVERITY_COLOURS["warning"] == QColor(STATE_SHADES[State.WARN].dark)
    assert STATE_LOOKS[ServiceState.FAILED].colour == QColor(STATE_SHADES[State.ERROR].dark)
    assert dict(SEVERITY_COLOURS).keys() == {"info", "warning", "error"}


def test_the_tray_dot_and_state_icon_are_drawn_from_the_table(app: QApplication) -> None:
    light(app)
    image = status_icon(ServiceState.READY, OverallStatus.WORKING).pixmap(64, 64).toImage()
    assert image.pixelColor(48, 48) == QColor(STATE_SHADES[State.INFO].light)
    waiting = state_icon(ServiceState.CONNECTING).pixmap(64, 64).toImage()
    assert waiting.pixelColor(32, 32) == QColor(STATE_SHADES[State.PENDING].light)


def test_a_banner_of_a_state_turns_with_the_palette(app: QApplication, qtbot: QtBot) -> None:
    light(app)
    banner = Banner(State.ERROR, "PAIR service", "is not running")
    qtbot.addWidget(banner)
    assert STATE_SHADES[State.ERROR].light in banner.styleSheet()
    app.setPalette(dark_palette())
    qtbot.waitUntil(lambda: STATE_SHADES[State.ERROR].dark in banner.styleSheet())


def test_a_cluster_notice_tints_failures_and_clears_for_outcomes(qtbot: QtBot) -> None:
    notice = Notice()
    qtbot.addWidget(notice)
    notice.warn("Could not remove nas.")
    assert tinted_state(notice) is State.ERROR
    notice.say("Removed nas.")
    assert tinted_state(notice) is None
    assert notice.styleSheet() == ""


def test_the_empty_jobs_page_is_the_shared_empty_state(qtbot: QtBot) -> None:
    empty = JobsEmptyState()
    qtbot.addWidget(empty)
    assert isinstance(empty, EmptyState)
    empty.show_message("No jobs match these filters", "3 jobs are hidden.", show_all=True)
    assert empty.show_all_button is empty.action_button
    assert not empty.show_all_button.isHidden()
    assert empty.show_all_button.text() == "Show all jobs"
    empty.show_message("No jobs yet", "Requests show up here.", show_all=False)
    assert empty.show_all_button.isHidden()


def test_a_checked_chip_is_tinted_from_the_palette_and_its_dots_follow_it(
    app: QApplication, qtbot: QtBot
) -> None:
    light(app)
    light_style = chip_style(app.palette())
    assert chip_style(dark_palette()) != light_style
    bar = JobsFilterBar(JobsModel())
    qtbot.addWidget(bar)
    assert bar.styleSheet() == light_style
    app.setPalette(dark_palette())
    qtbot.waitUntil(lambda: bar.styleSheet() == chip_style(dark_palette()))
    dot = bar.state_buttons["failed"].icon().pixmap(32, 32).toImage()
    assert dot.pixelColor(16, 16) == QColor(STATE_SHADES[State.ERROR].dark)


@pytest.mark.parametrize("scheme", [Appearance.DARK, Appearance.LIGHT])
async def test_jobs_cluster_pairing_and_the_window_read_in_light_and_dark(
    app: QApplication, tmp_path: Path, scheme: Appearance
) -> None:
    app.setQuitOnLastWindowClosed(False)
    grabs = await watch_grabs(lambda: render_looks_more.render_all(tmp_path, (scheme,)))
    assert grabs.names >= WINDOWS
    assert grabs.darkness == {scheme is Appearance.DARK}
    assert grabs.problems == []
    assert len(list((tmp_path / scheme.value).glob("*.png"))) >= 19


async def test_the_status_dot_takes_the_dark_shade_when_the_palette_turns(
    app: QApplication, qtbot: QtBot, tmp_path: Path
) -> None:
    light(app)
    async with window_rig(qtbot, tmp_path) as rig:
        window = rig.window
        try:
            pending = STATE_SHADES[State.PENDING]
            assert window.status_dot.colour == QColor(pending.light)
            app.setPalette(dark_palette())
            qtbot.waitUntil(lambda: window.status_dot.colour == QColor(pending.dark))
        finally:
            window.close()
