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
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import qasync  # noqa: E402
import render_gpu_card  # noqa: E402
import render_hub  # noqa: E402
import render_playground  # noqa: E402
from PySide6.QtWidgets import QApplication, QWidget  # noqa: E402

from app.broker.state import ServiceState  # noqa: E402
from app.models.nodes import NodesModel  # noqa: E402
from app.window.empty_page import EmptyPage  # noqa: E402
from app.window.overview_page import OverviewPage  # noqa: E402
from app.window.theme import Appearance, ThemeFollower  # noqa: E402

SCHEMES = (Appearance.LIGHT, Appearance.DARK)
EMPTY_SIZE = (900, 520)


def save(widget: QWidget, path: Path) -> None:
    """Let layouts settle, then write ``widget`` to ``path``."""
    QApplication.processEvents()
    if not widget.grab().save(str(path)):
        raise OSError(f"could not write {path}")
    print(f"saved {path}")


async def render_empty(out_dir: Path) -> None:
    """The Overview with no computers yet and a page that is not built, as a newcomer sees."""
    connection = render_hub.ScriptedConnection(render_hub.answers())
    overview = OverviewPage(connection, NodesModel())
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


async def render_all(out_dir: Path, schemes: tuple[Appearance, ...]) -> None:
    """Every page in every scheme, each scheme in its own folder."""
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    follower = ThemeFollower(app, Appearance.LIGHT)
    for scheme in schemes:
        follower.set_choice(scheme)
        folder = out_dir / scheme.value
        folder.mkdir(parents=True, exist_ok=True)
        await render_gpu_card.render(folder)
        await render_hub.render(folder)
        await render_playground.render(folder)
        await render_empty(folder)


def main() -> int:
    """Parse arguments and render."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out-dir", type=Path, default=Path("/tmp/looks"))
    parser.add_argument("--only", choices=[scheme.value for scheme in SCHEMES])
    arguments = parser.parse_args()
    schemes = tuple(s for s in SCHEMES if arguments.only in (None, s.value))
    qt_app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(qt_app, QApplication)
    qt_app.setQuitOnLastWindowClosed(False)  # closing a page must not stop the loop
    with asyncio.Runner(loop_factory=lambda: qasync.QEventLoop(qt_app)) as runner:
        runner.run(render_all(arguments.out_dir, schemes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
