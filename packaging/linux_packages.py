"""Linux packages from a built bundle (packaging/build_bundle.py):

    python packaging/linux_packages.py deb     --bundle dist/llm-workstation --out dist
    python packaging/linux_packages.py tarball --bundle dist/llm-workstation --out dist

``deb``: /opt/llm-workstation (the bundle), /usr/bin/llm-workstation (a relative symlink), the .desktop entry,
hicolor icons and AppStream metainfo under /usr/share, built with ``dpkg-deb --build --root-owner-group``.
Desktop and icon caches are refreshed by dpkg triggers (desktop-file-utils, hicolor-icon-theme): no scripts.
``tarball``: an AppImage-style folder (AppRun, the .desktop, the icon, LICENSE, the bundle) as .tar.gz; unpack
anywhere and run ./AppRun. The MIT licence travels with each: /usr/share/doc/llm-workstation/copyright in the .deb,
LICENSE at the tarball's top, and _internal/LICENSE in the bundle itself.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESOURCES = ROOT / "app" / "resources"
LICENSE = ROOT / "LICENSE"
HOMEPAGE = "https://github.com/llmworkstation/llm-workstation"
NAME = "llm-workstation"
DESKTOP_ID = "io.github.llmworkstation.LLMWorkstation"
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
MAINTAINER = "LLM Workstation developers <llm-workstation@users.noreply.github.com>"
# What Qt's xcb platform plugin and QtGui load from the system (ldd of libqxcb.so, libQt6XcbQpa, libQt6Gui);
# the bundle carries the rest. Debian/Ubuntu package names; "a | b" where a release renamed one.
QT_XCB_DEPENDS = (
    "libgl1",
    "libegl1",
    "libfontconfig1",
    "libfreetype6",
    "libx11-6",
    "libx11-xcb1",
    "libxcb1",
    "libxcb-cursor0",
    "libxcb-icccm4",
    "libxcb-image0",
    "libxcb-keysyms1",
    "libxcb-randr0",
    "libxcb-render0",
    "libxcb-render-util0",
    "libxcb-shape0",
    "libxcb-shm0",
    "libxcb-sync1",
    "libxcb-util1",
    "libxcb-xfixes0",
    "libxcb-xkb1",
    "libxkbcommon0",
    "libxkbcommon-x11-0",
    "libdbus-1-3",
    "libglib2.0-0t64 | libglib2.0-0",
)
SUMMARY = "Run large language models on your own machine"
DESCRIPTION = """\
 One desktop window that drives llama.cpp for chat and vLLM for batched
 serving, with a live GPU memory and KV-cache monitor and Ollama Modelfiles
 as the one preset format across engines. vLLM is installed separately by
 the app into its own environment when asked."""


def app_version() -> str:
    match = re.search(r'__version__\s*=\s*"([^"]+)"', (ROOT / "app" / "__init__.py").read_text(encoding="utf-8"))
    if match is None:
        raise SystemExit("app/__init__.py has no __version__")
    return match.group(1)


def deb_architecture() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()


def needed_glibc(bundle: Path) -> str:
    """The newest GLIBC_x.y symbol version any ELF file in the bundle asks for (the libc6 lower bound)."""
    pattern = re.compile(rb"GLIBC_(2\.\d+)(?:\.\d+)?\x00")
    newest = (2, 17)
    for path in bundle.rglob("*"):
        if path.is_symlink() or not path.is_file():
            continue
        with path.open("rb") as handle:
            if handle.read(4) != b"\x7fELF":
                continue
            handle.seek(0)
            for found in pattern.findall(handle.read()):
                newest = max(newest, tuple(int(x) for x in found.decode().split(".")))  # type: ignore[assignment]
    return ".".join(map(str, newest))


def control_text(bundle: Path, installed_kib: int, version: str, arch: str) -> str:
    depends = ", ".join((f"libc6 (>= {needed_glibc(bundle)})", *QT_XCB_DEPENDS))
    return (
        f"Package: {NAME}\nVersion: {version}\nSection: science\nPriority: optional\nArchitecture: {arch}\n"
        f"Maintainer: {MAINTAINER}\nInstalled-Size: {installed_kib}\nDepends: {depends}\n"
        f"Homepage: {HOMEPAGE}\nDescription: {SUMMARY}\n{DESCRIPTION}\n"
    )


def copyright_text() -> str:
    """/usr/share/doc/<package>/copyright: where the app comes from, and the MIT licence's full text."""
    return (
        f"{NAME}\nSource: {HOMEPAGE}\n\n"
        f"The bundle in /opt/{NAME} also carries third-party components (Python, Qt for Python, llama.cpp,\n"
        "NumPy and others); each keeps its own licence.\n\n" + LICENSE.read_text(encoding="utf-8")
    )


def _copy_desktop_files(share: Path) -> None:
    """The .desktop entry (Exec=llm-workstation, found on PATH), icons and metainfo under a share/ folder."""
    (share / "applications").mkdir(parents=True)
    shutil.copy(RESOURCES / "desktop" / f"{DESKTOP_ID}.desktop", share / "applications")
    (share / "metainfo").mkdir(parents=True)
    shutil.copy(RESOURCES / "desktop" / f"{DESKTOP_ID}.metainfo.xml", share / "metainfo")
    for size in ICON_SIZES:
        target = share / "icons" / "hicolor" / f"{size}x{size}" / "apps"
        target.mkdir(parents=True)
        shutil.copy(RESOURCES / "icons" / f"{NAME}-{size}.png", target / f"{DESKTOP_ID}.png")
    scalable = share / "icons" / "hicolor" / "scalable" / "apps"
    scalable.mkdir(parents=True)
    shutil.copy(RESOURCES / "icons" / f"{NAME}.svg", scalable / f"{DESKTOP_ID}.svg")


def build_deb(bundle: Path, out_dir: Path, version: str | None = None, *, fast: bool = False) -> Path:
    """Stage the package tree and run dpkg-deb; returns the .deb path. ``fast``: gzip -1 instead of xz -6
    (tests: seconds instead of minutes, about a third larger)."""
    version = version or app_version()
    arch = deb_architecture()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{NAME}_{version}_{arch}.deb"
    with tempfile.TemporaryDirectory(prefix="llmw-deb-") as tmp:
        root = Path(tmp) / "root"
        shutil.copytree(bundle, root / "opt" / NAME, symlinks=True)
        (root / "usr" / "bin").mkdir(parents=True)
        (root / "usr" / "bin" / NAME).symlink_to(f"../../opt/{NAME}/{NAME}")  # relative: works under any root
        _copy_desktop_files(root / "usr" / "share")
        doc = root / "usr" / "share" / "doc" / NAME
        doc.mkdir(parents=True)
        (doc / "copyright").write_text(copyright_text(), encoding="utf-8")
        installed_kib = sum(p.lstat().st_size for p in root.rglob("*")) // 1024 + 1
        (root / "DEBIAN").mkdir()
        (root / "DEBIAN" / "control").write_text(control_text(bundle, installed_kib, version, arch))
        for path in root.rglob("*"):  # dpkg-deb rejects group/other-writable control files; keep modes sane
            if not path.is_symlink():
                path.chmod(path.stat().st_mode & 0o755 | (0o644 if path.is_file() else 0o755))
        compression = ["-Zgzip", "-z1"] if fast else ["-Zxz", "-z6"]
        subprocess.run(["dpkg-deb", "--build", "--root-owner-group", *compression, str(root), str(target)], check=True)
    return target


APP_RUN = """#!/bin/sh
# Start LLM Workstation from wherever this folder was unpacked.
HERE="$(dirname "$(readlink -f "$0")")"
exec "$HERE/{name}/{name}" "$@"
"""


def build_tarball(bundle: Path, out_dir: Path, version: str | None = None) -> Path:
    """An AppImage-style folder (AppRun + .desktop + icon + LICENSE + bundle) packed as .tar.gz; returns its path."""
    version = version or app_version()
    machine = subprocess.run(["uname", "-m"], capture_output=True, text=True, check=True).stdout.strip()
    top = f"{NAME}-{version}-{machine}"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{top}.tar.gz"
    with tempfile.TemporaryDirectory(prefix="llmw-tar-") as tmp:
        folder = Path(tmp) / top
        shutil.copytree(bundle, folder / NAME, symlinks=True)
        app_run = folder / "AppRun"
        app_run.write_text(APP_RUN.format(name=NAME))
        app_run.chmod(0o755)
        shutil.copy(RESOURCES / "desktop" / f"{DESKTOP_ID}.desktop", folder)
        shutil.copy(RESOURCES / "icons" / f"{NAME}-256.png", folder / f"{DESKTOP_ID}.png")
        shutil.copy(LICENSE, folder / "LICENSE")
        (folder / ".DirIcon").symlink_to(f"{DESKTOP_ID}.png")
        with tarfile.open(target, "w:gz", compresslevel=6) as archive:
            archive.add(folder, arcname=top)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("deb", "tarball"))
    parser.add_argument("--bundle", type=Path, default=ROOT / "dist" / NAME, help="the built bundle folder")
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the package is written")
    parser.add_argument("--version", default=None, help="package version (default: app.__version__)")
    args = parser.parse_args()
    if not (args.bundle / NAME).is_file():
        print(f"linux_packages: no bundle at {args.bundle}: run packaging/build_bundle.py first", file=sys.stderr)
        return 2
    if args.kind == "deb" and shutil.which("dpkg-deb") is None:
        print("linux_packages: dpkg-deb is missing (Debian/Ubuntu: apt-get install dpkg)", file=sys.stderr)
        return 2
    build = build_deb if args.kind == "deb" else build_tarball
    try:
        target = build(args.bundle.absolute(), args.out.absolute(), args.version)
    except subprocess.CalledProcessError as exc:
        print(f"linux_packages: {exc.cmd[0]} failed (exit {exc.returncode})", file=sys.stderr)
        return 1
    print(f"built {target} ({target.stat().st_size / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
