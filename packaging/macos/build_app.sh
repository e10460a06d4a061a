#!/usr/bin/env bash
# Build dist/PAIR.app and dist/PAIR-<version>.dmg on macOS (see packaging/macos/README.md).
#
#     packaging/macos/build_app.sh              # with python3 from PATH
#     PYTHON=.venv/bin/python packaging/macos/build_app.sh
#
# PYTHON is the interpreter of PAIR's environment, with the `dev` extra (PyInstaller) installed:
# PyInstaller collects what that environment has. The bundle is signed ad hoc, as PyInstaller
# does by default, unless CODESIGN_IDENTITY names a Developer ID Application certificate of the
# login keychain: then the app (hardened runtime) and the disk image are signed with it.
# Notarizing is the maintainer's step after this one (README.md).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"

if [[ "$(uname -s)" != "Darwin" ]]; then
    echo "build_app.sh: this builds a macOS app bundle; run it on macOS" >&2
    exit 1
fi

VERSION="$("$PYTHON" -c 'import backend; print(backend.__version__)')"
ICNS="$ROOT/build/icons/pair.icns"
APP="$ROOT/dist/PAIR.app"
DMG="$ROOT/dist/PAIR-$VERSION.dmg"
STAGING="$ROOT/build/dmg"

echo "== PAIR $VERSION: icon"
"$PYTHON" packaging/icon_formats.py icns "$ICNS"

echo "== PAIR $VERSION: app bundle"
# The build's commit goes into the app for the time of the build (backend.common.buildinfo),
# as packaging/build_frozen.py does for the one-folder build.
"$PYTHON" - <<'PY'
from pathlib import Path

from backend.common.buildinfo import git_commit, write_build_info

commit = git_commit(Path.cwd())
if commit is not None:
    write_build_info(commit)
PY
remove_build_info() {
    "$PYTHON" -c 'from backend.common.buildinfo import remove_build_info; remove_build_info()'
}
trap remove_build_info EXIT
rm -rf "$APP"
PAIR_ICNS="$ICNS" "$PYTHON" -m PyInstaller --noconfirm --log-level WARN \
    --distpath "$ROOT/dist" --workpath "$ROOT/build/pyinstaller-macos" \
    packaging/pair-macos.spec
remove_build_info
trap - EXIT

if [[ -n "${CODESIGN_IDENTITY:-}" ]]; then
    codesign --force --deep --options runtime --timestamp \
        --entitlements packaging/macos/entitlements.plist \
        --sign "$CODESIGN_IDENTITY" "$APP"
fi
codesign --verify --deep --strict "$APP"
test -x "$APP/Contents/MacOS/pair"
test -f "$APP/Contents/Resources/pair.icns"
plutil -lint "$APP/Contents/Info.plist"
test "$(/usr/libexec/PlistBuddy -c 'Print :CFBundleShortVersionString' "$APP/Contents/Info.plist")" = "$VERSION"
"$APP/Contents/MacOS/pair" --version

echo "== PAIR $VERSION: disk image"
# The image holds the app and a link to /Applications to drag it onto.
rm -rf "$STAGING"
mkdir -p "$STAGING"
ditto "$APP" "$STAGING/PAIR.app"
ln -s /Applications "$STAGING/Applications"
# hdiutil create fails now and then with "Resource busy" on hosted runners: try a few times.
for attempt in 1 2 3 4 5; do
    if hdiutil create -volname PAIR -srcfolder "$STAGING" -fs HFS+ -ov -format UDZO "$DMG"; then
        break
    fi
    if [[ "$attempt" == 5 ]]; then
        echo "build_app.sh: hdiutil create failed $attempt times" >&2
        exit 1
    fi
    sleep $((attempt * 5))
done
if [[ -n "${CODESIGN_IDENTITY:-}" ]]; then
    codesign --force --timestamp --sign "$CODESIGN_IDENTITY" "$DMG"
fi
hdiutil verify "$DMG"
rm -rf "$STAGING"

echo "app: $APP ($(du -sh "$APP" | cut -f1))"
echo "disk image: $DMG ($(du -sh "$DMG" | cut -f1))"
