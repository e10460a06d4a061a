"""Build the frozen app (PyInstaller, one folder) from ``packaging/pair.spec``.

    python packaging/build_frozen.py [--dist DIR] [--work DIR]   # default: build/frozen/pair/

Run it with the interpreter of PAIR's environment (``python3 scripts/bootstrap.py package`` does):
PyInstaller collects what that environment has installed. The build's commit is written into the
app (``backend.common.buildinfo``) for the time of the build. Prints the folder and its size;
the exit code is non-zero when the build fails or leaves no executable.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "packaging" / "pair.spec"
DEFAULT_DIST = ROOT / "build" / "frozen"
DEFAULT_WORK = ROOT / "build" / "pyinstaller"
APP_NAME = "pair"

sys.path.insert(0, str(ROOT))
from backend.common.buildinfo import git_commit, remove_build_info, write_build_info  # noqa: E402


def executable(folder: Path) -> Path:
    """The ``pair`` executable inside a built folder."""
    return folder / (f"{APP_NAME}.exe" if sys.platform == "win32" else APP_NAME)


def folder_size(folder: Path) -> int:
    """Bytes of every file under ``folder`` (symbolic links not followed)."""
    return sum(path.lstat().st_size for path in folder.rglob("*") if path.is_file())


def build(dist: Path, work: Path) -> Path:
    """Run PyInstaller into ``dist`` (its files in ``work``); return the app's folder. Raises
    CalledProcessError."""
    command = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--log-level",
        "WARN",
        "--distpath",
        str(dist),
        "--workpath",
        str(work),
        str(SPEC),
    ]
    commit = git_commit(ROOT)
    if commit is not None:
        write_build_info(commit)
    try:
        subprocess.run(command, cwd=ROOT, check=True, env=_environment(work))
    finally:
        remove_build_info()
    return dist / APP_NAME


def _environment(work: Path) -> dict[str, str]:
    # PyInstaller's cache of processed binaries, kept in the work dir rather than in the user's
    # cache: two builds at once (another checkout, another spec) would corrupt its index.
    return {"PYINSTALLER_CONFIG_DIR": str(work / "config"), **os.environ}


def _shown(folder: Path) -> str:
    """A default folder as the checkout names it."""
    return f"{folder.relative_to(ROOT)}/"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Build the frozen PAIR app (one folder).")
    parser.add_argument(
        "--dist",
        type=Path,
        default=DEFAULT_DIST,
        help=f"output folder; the app lands in its {APP_NAME}/ (default: {_shown(DEFAULT_DIST)})",
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=DEFAULT_WORK,
        help=f"PyInstaller's work folder (default: {_shown(DEFAULT_WORK)})",
    )
    args = parser.parse_args(argv)
    try:
        import PyInstaller  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        print(
            "build_frozen: PyInstaller is not installed in this environment "
            "(it is in the `dev` extra: python3 scripts/bootstrap.py package)",
            file=sys.stderr,
        )
        return 1
    try:
        folder = build(args.dist.resolve(), args.work.resolve())
    except subprocess.CalledProcessError as exc:
        print(f"build_frozen: PyInstaller failed with exit code {exc.returncode}", file=sys.stderr)
        return 1
    if not executable(folder).is_file():
        print(f"build_frozen: no executable at {executable(folder)}", file=sys.stderr)
        return 1
    size = folder_size(folder)
    print(f"frozen app: {folder} ({size / 2**20:.1f} MiB)")
    print(f"executable: {executable(folder)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
