"""The look of the finished pages: one table of state colours that reads on light and dark,
tinted text that follows the palette, every page's labels readable in both schemes, and empty
states that offer the action that fills them."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QLabel, QWidget
from pytestqt.qtbot import QtBot

from app.models.nodes import NodesModel
from app.window.look import SERIES_SHADES, STATE_SHADES, State, state_colour
from app.window.models_page import OPEN_HUB
from app.window.overview_page import ADD_COMPUTER, OPEN_SERVICE, OverviewPage
from app.window.theme import Appearance, ThemeFollower, dark_palette
from app.window.widgets import EmptyState, tint, tinted_state
from tests.gui.helpers import FakeConnection, settle, wait_until
from tests.gui.looks_grabs import watch_grabs
from tests.gui.test_models_page import close, listing, make_ui, start

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

render_looks = importlib.import_module("render_looks")  # a script, not a package

PAGES = {"OverviewPage", "EnginesPage", "ModelsPage", "PlaygroundPage", "EmptyPage"}


@pytest.fixture
def app(qapp: QApplication) -> Iterator[QApplication]:
    yield qapp
    qapp.setPalette(QPalette())  # the platform's palette again for the tests after this one


def backgrounds(palette: QPalette) -> list[QColor]:
    return [palette.color(role) for role in (QPalette.ColorRole.Window, QPalette.ColorRole.Base)]


def test_each_state_has_a_light_and_a_dark_shade_readable_as_text_on_its_palette(
    app: QApplication,
) -> None:
    light, dark = app.style().standardPalette(), dark_palette()
    for state, shade in STATE_SHADES.items():
        assert shade.light != shade.dark, state
        for back in backgrounds(light):
            assert render_looks.contrast(shade.pick(False), back) >= 4.5, (state, "light")
        for back in backgrounds(dark):
            assert render_looks.contrast(shade.pick(True), back) >= 4.5, (state, "dark")
    assert len({shade.light for shade in STATE_SHADES.values()}) == len(State)
    assert all(shade.light != shade.dark for shade in SERIES_SHADES.values())


def test_a_state_colour_follows_the_application_palette(app: QApplication) -> None:
    app.setPalette(dark_palette())
    assert state_colour(State.ERROR) == QColor(STATE_SHADES[State.ERROR].dark)
    app.setPalette(app.style().standardPalette())
    assert state_colour(State.ERROR) == QColor(STATE_SHADES[State.ERROR].light)


def test_tinted_text_turns_with_the_palette_and_untinted_text_is_the_usual_colour(
    app: QApplication, qtbot: QtBot
) -> None:
    follower = ThemeFollower(app, Appearance.LIGHT)
    label = QLabel("Pull failed")
    qtbot.addWidget(label)
    tint(label, State.ERROR)
    text = QPalette.ColorRole.WindowText
    assert label.palette().color(text) == QColor(STATE_SHADES[State.ERROR].light)
    follower.set_choice(Appearance.DARK)  # widgets hear of a new palette from the event loop
    qtbot.waitUntil(lambda: label.palette().color(text) == QColor(STATE_SHADES[State.ERROR].dark))
    tint(label, None)
    assert tinted_state(label) is None
    assert label.palette().color(text) == dark_palette().color(text)
    follower.setParent(None)


def test_the_check_names_a_label_too_faint_to_read(app: QApplication, qtbot: QtBot) -> None:
    app.setPalette(dark_palette())
    page = QWidget()
    qtbot.addWidget(page)
    faint = QLabel("almost invisible", page)
    palette = faint.palette()
    palette.setColor(QPalette.ColorRole.WindowText, QColor("#303236"))
    faint.setPalette(palette)
    QLabel(f'<span style="color: {STATE_SHADES[State.OK].light};">●</span> Online', page).move(
        0, 30
    )  # a dot in the light green: too dark on a dark page
    page.show()
    problems = render_looks.unreadable_labels(page)
    assert [problem.split(":")[0] for problem in problems] == [
        "'almost invisible'",
        "'<span style=\"color",
    ]


@pytest.mark.parametrize("scheme", [Appearance.DARK, Appearance.LIGHT])
async def test_every_finished_page_reads_in_light_and_dark(
    app: QApplication, tmp_path: Path, scheme: Appearance
) -> None:
    grabs = await watch_grabs(lambda: render_looks.render_all(tmp_path, (scheme,)))
    assert grabs.names >= PAGES
    assert grabs.darkness == {scheme is Appearance.DARK}
    assert grabs.problems == []
    assert len(list((tmp_path / scheme.value).glob("*.png"))) >= 10


async def test_the_empty_overview_offers_what_fills_it(
    qtbot: QtBot, connection: FakeConnection
) -> None:
    asked: list[str] = []
    page = OverviewPage(
        connection,
        NodesModel(),
        add_computer=lambda: asked.append("add"),
        open_service=lambda: asked.append("service"),
    )
    qtbot.addWidget(page)
    button = page.empty_state.action_button
    assert button.isHidden()  # connecting: nothing to do but wait
    connection.become_ready()
    await settle()
    assert not button.isHidden() and button.text() == ADD_COMPUTER
    button.click()
    connection.lose_session()
    await settle()
    assert button.text() == OPEN_SERVICE
    button.click()
    assert asked == ["add", "service"]


def test_an_empty_state_without_an_action_shows_no_button(qtbot: QtBot) -> None:
    empty = EmptyState()
    qtbot.addWidget(empty)
    empty.show_text("No models yet", "Pull one above.")
    assert empty.action_button.isHidden()
    assert empty.headline.text() == "No models yet"


async def test_no_models_yet_offers_the_model_hub(qtbot: QtBot) -> None:
    ui = await make_ui(qtbot)
    try:
        await start(ui, local=listing({"ollama": [], "lmstudio": []}), nodes=[])
        empty = ui.page.models_tab.empty_note
        await wait_until(lambda: empty.headline.text() == "No models yet")
        assert empty.action_button.text() == OPEN_HUB
        empty.action_button.click()
        assert ui.page.tabs.currentWidget() is ui.page.hub
    finally:
        await close(ui)
