#!/usr/bin/env bash
# macOS: build "LLM Workstation.app" with the same PyInstaller spec (its BUNDLE step) and pack it into a .dmg.
#
#   bash packaging/macos/build_dmg.sh            (from the repository root, with the app's venv active or in .venv)
#
# For Apple Silicon GPUs, build llama-cpp-python with Metal first (the default on arm64 macOS wheels built from
# source): CMAKE_ARGS="-DGGML_METAL=on" pip install --no-cache-dir --force-reinstall llama-cpp-python
# Signing/notarization (needs an Apple Developer ID): set CODESIGN_IDENTITY to sign before the .dmg is made.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-.venv/bin/python}"
VERSION="$("$PYTHON" -c 'import app; print(app.__version__)')"
ARCH="$(uname -m)"
APP="dist/LLM Workstation.app"
DMG="dist/llm-workstation-${VERSION}-macos-${ARCH}.dmg"

"$PYTHON" packaging/build_bundle.py --dist dist --work build/pyinstaller
test -d "$APP" || { echo "build_dmg: $APP was not built" >&2; exit 1; }
"$APP/Contents/MacOS/llm-workstation" --version

if [ -n "${CODESIGN_IDENTITY:-}" ]; then
  codesign --deep --force --options runtime --timestamp --sign "$CODESIGN_IDENTITY" "$APP"
fi

rm -f "$DMG"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"   # drag-to-install
hdiutil create -volname "LLM Workstation" -srcfolder "$STAGE" -fs HFS+ -format UDZO -ov "$DMG"
echo "built $DMG"
