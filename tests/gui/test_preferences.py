"""The app's preferences: the user's file, or the one ``PAIR_PREFERENCES`` names (the demo's)."""

from __future__ import annotations

from pathlib import Path

from app.preferences import ENV_PREFERENCES, preferences, preferences_file
from backend.devtools.demo import app_environment


def test_the_demo_app_keeps_its_preferences_apart_from_the_real_app(tmp_path: Path) -> None:
    real = preferences({})
    real.setValue("welcome/shown", False)
    real.sync()
    real_file = Path(real.fileName())
    before = real_file.read_bytes()

    demo_data_dir = tmp_path / "demo" / "gaming-pc"
    demo_data_dir.mkdir(parents=True)
    environ = app_environment(demo_data_dir)
    demo = preferences(environ)
    demo.setValue("welcome/shown", True)
    demo.setValue("jobs/states", "failed")
    demo.sync()

    demo_file = Path(demo.fileName())
    assert demo_file != real_file
    assert demo_file.parent == demo_data_dir and demo_file.is_file()
    assert real_file.read_bytes() == before  # the real app's first run and filters untouched
    assert preferences({}).value("welcome/shown") in (False, "false")


def test_the_variable_names_a_file_and_blank_means_the_usual_place(tmp_path: Path) -> None:
    assert preferences_file({ENV_PREFERENCES: str(tmp_path / "p.ini")}) == tmp_path / "p.ini"
    assert preferences_file({ENV_PREFERENCES: "  "}) is None
    assert preferences_file({}) is None
    assert ENV_PREFERENCES in app_environment(tmp_path)
