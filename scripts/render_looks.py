"""Render the Overview, Engines, Models (and its hub) and Playground pages in light and dark.

    .venv/bin/python scripts/render_looks.py [--out-dir /tmp/looks] [--only light|dark]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set; no broker runs. The
scripted data and the steps are those of ``render_gpu_card.py``, ``render_hub.py`` and
``render_playground.py`` (imported, not copied), run once under the light palette and once
under PAIR's dark one; each scheme's PNGs go to their own folder (``light/``, ``dark/``), with
the empty Overview and a not-built page beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import qasync  # noqa: E402
import render_gpu_card  # noqa: E402
import render_hub  # noqa: E402
import render_playground  # noqa: E402
from PySide6.QtGui import QColor, QPalette, QPixmap  # noqa: E402
from PySide6.QtWidgets import QApplication, QLabel, QWidget  # noqa: E402

from app.broker.state import ServiceState  # noqa: E402
from app.models.nodes import NodesModel  # noqa: E402
from app.window.empty_page import EmptyPage  # noqa: E402
from app.window.overview_page import OverviewPage  # noqa: E402
from app.window.theme import Appearance, ThemeFollower  # noqa: E402

SCHEMES = (Appearance.LIGHT, Appearance.DARK)
EMPTY_SIZE = (900, 520)
READABLE = 4.5  # WCAG's contrast for body text
# Secondary text takes the palette's placeholder colour; Fusion's light one is 3.9:1 on white,
# so muted labels are held to WCAG's figure for large text and interface parts.
MUTED_READABLE = 3.0
_INLINE_COLOUR = re.compile(r"color:\s*(#[0-9a-fA-F]{6})")


def luminance(colour: QColor) -> float:
    """WCAG's relative luminance of an opaque colour."""

    def linear(channel: float) -> float:
        return channel / 12.92 if channel <= 0.03928 else ((channel + 0.055) / 1.055) ** 2.4

    red, green, blue = (linear(c) for c in (colour.redF(), colour.greenF(), colour.blueF()))
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def over(colour: QColor, background: QColor) -> QColor:
    """``colour`` painted over an opaque ``background`` (a translucent text colour reads as
    this)."""
    alpha = colour.alphaF()
    mixed = [
        alpha * top + (1 - alpha) * bottom
        for top, bottom in zip(
            (colour.redF(), colour.greenF(), colour.blueF()),
            (background.redF(), background.greenF(), background.blueF()),
            strict=True,
        )
    ]
    return QColor.fromRgbF(*mixed)


def contrast(text: QColor, background: QColor) -> float:
    """WCAG's contrast ratio (1-21) of ``text`` on ``background``."""
    lighter, darker = sorted((luminance(over(text, background)), luminance(background)))[::-1]
    return (lighter + 0.05) / (darker + 0.05)


def text_colours(label: QLabel) -> list[QColor]:
    """The colours ``label``'s text is drawn in: its foreground role and any inline colour."""
    colours = [label.palette().color(label.foregroundRole())]
    for source in (label.text(), label.styleSheet()):
        colours += [QColor(found) for found in _INLINE_COLOUR.findall(source)]
    return colours


def unreadable_labels(widget: QWidget) -> list[str]:
    """Each shown, enabled label of ``widget`` whose text is fainter than ``READABLE`` (muted
    text: ``MUTED_READABLE``) on its window or base colour (a page's or a card's background),
    with the ratio."""
    found = []
    for label in widget.findChildren(QLabel):
        if not (label.isVisible() and label.isEnabled() and label.text().strip()):
            continue
        palette = label.palette()
        backgrounds = (
            palette.color(QPalette.ColorRole.Window),
            palette.color(QPalette.ColorRole.Base),
        )
        worst = min(contrast(text, back) for text in text_colours(label) for back in backgrounds)
        muted = label.foregroundRole() == QPalette.ColorRole.PlaceholderText
        if worst < (MUTED_READABLE if muted else READABLE):
            found.append(f"{label.text()[:60]!r}: {worst:.1f}:1")
    return found


@contextmanager
def checking_grabs(check: Callable[[QWidget], None]) -> Iterator[None]:
    """Run ``check`` on every widget grabbed (the render scripts grab each page they save)."""
    grab = QWidget.grab

    def checked_grab(widget: QWidget, *args: object) -> QPixmap:
        check(widget)
        return grab(widget, *args)  # type: ignore[arg-type]

    setattr(QWidget, "grab", checked_grab)  # noqa: B010 - mypy refuses a method assignment
    try:
        yield
    finally:
        setattr(QWidget, "grab", grab)  # noqa: B010


def report_unreadable(widget: QWidget) -> None:
    """Print the labels of ``widget`` that are hard to read."""
    for problem in unreadable_labels(widget):
        print(f"  hard to read on {type(widget).__name__}: {problem}")


def save(widget: QWidget, path: Path) -> None:
    """Let layouts settle, then write ``widget`` to ``path``."""
    QApplication.processEvents()
    if not widget.grab().save(str(path)):
        raise OSError(f"could not write {path}")
    print(f"saved {path}")


async def render_empty(out_dir: Path) -> None:
    """The Overview with no computers yet and a page that is not built, as a newcomer sees."""
    connection = render_hub.ScriptedConnection(render_hub.answers())
    overview = OverviewPage(
        connection, NodesModel(), add_computer=lambda: None, open_service=lambda: None
    )  # the buttons show once the page has somewhere to send them
    later = EmptyPage("Later", "Nothing here yet", "This page fills once the service answers.")
    for widget in (overview, later):
        widget.resize(*EMPTY_SIZE)
        widget.show()
    try:
        save(overview, out_dir / "overview-empty.png")
        connection.become_ready()
        await asyncio.sleep(0.1)
        assert connection.state is ServiceState.READY
        save(overview, out_dir / "overview-empty-ready.png")
        save(later, out_dir / "empty-page.png")
    finally:
        overview.close()
        later.close()
        await connection.stop()


async def in_each_scheme(
    out_dir: Path, schemes: tuple[Appearance, ...], render: Callable[[Path], Awaitable[None]]
) -> None:
    """Run ``render`` once a scheme, the app's palette in that scheme, each in its own folder."""
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    follower = ThemeFollower(app, Appearance.LIGHT)
    try:
        for scheme in schemes:
            follower.set_choice(scheme)
            folder = out_dir / scheme.value
            folder.mkdir(parents=True, exist_ok=True)
            await render(folder)
    finally:
        follower.setParent(None)  # let it go: the desktop's scheme no longer moves the palette
        app.setPalette(QPalette())


async def render_scheme(folder: Path) -> None:
    """Every page of this script in the palette in use now."""
    await render_gpu_card.render(folder)
    await render_hub.render(folder)
    await render_playground.render(folder)
    await render_empty(folder)


async def render_all(out_dir: Path, schemes: tuple[Appearance, ...]) -> None:
    """Every page in every scheme, each scheme in its own folder."""
    await in_each_scheme(out_dir, schemes, render_scheme)


def run_schemes(
    description: str | None,
    default_out_dir: Path,
    render: Callable[[Path, tuple[Appearance, ...]], Coroutine[Any, Any, None]],
) -> int:
    """Parse ``--out-dir`` and ``--only``, then ``render`` the chosen schemes, grabs checked."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out-dir", type=Path, default=default_out_dir)
    parser.add_argument("--only", choices=[scheme.value for scheme in SCHEMES])
    arguments = parser.parse_args()
    schemes = tuple(s for s in SCHEMES if arguments.only in (None, s.value))
    qt_app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(qt_app, QApplication)
    qt_app.setQuitOnLastWindowClosed(False)  # closing a page must not stop the loop
    with (
        asyncio.Runner(loop_factory=lambda: qasync.QEventLoop(qt_app)) as runner,
        checking_grabs(report_unreadable),
    ):
        runner.run(render(arguments.out_dir, schemes))
    return 0


def main() -> int:
    """Parse arguments and render."""
    description = __doc__.splitlines()[0] if __doc__ else None
    return run_schemes(description, Path("/tmp/looks"), render_all)


if __name__ == "__main__":
    sys.exit(main())
