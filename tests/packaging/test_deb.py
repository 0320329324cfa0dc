"""The .deb (slow; CI runs it): built from the session's bundle, installed into a throwaway root with
`dpkg --root`, its launcher on PATH runs the smoke check, its copyright file holds the LICENSE; the AppImage-style
tarball too."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from app.services.desktop_install import DESKTOP_ID, ICON_SIZES
from tests.packaging.conftest import assert_is_the_licence, load_script

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is missing (not a Debian-family system)"),
]


@pytest.fixture(scope="module")
def deb_file(bundle_dir, tmp_path_factory) -> Path:
    return load_script("linux_packages").build_deb(bundle_dir, tmp_path_factory.mktemp("deb"), fast=True)


@pytest.fixture(scope="module")
def installed_root(deb_file, tmp_path_factory) -> Path:
    """An empty dpkg database in a throwaway root, with the package installed into it."""
    root = tmp_path_factory.mktemp("root")
    admin = root / "var" / "lib" / "dpkg"
    for sub in ("info", "updates", "triggers"):
        (admin / sub).mkdir(parents=True)
    (admin / "status").touch()
    # --force-depends: the throwaway root has no libc6 & co. registered; the host provides the libraries.
    done = subprocess.run(
        [
            "dpkg",
            f"--root={root}",
            "--force-depends",
            "--force-script-chrootless",
            "--force-not-root",
            "-i",
            str(deb_file),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def _field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "--field", str(deb), name], capture_output=True, text=True).stdout.strip()


def test_deb_control_fields(deb_file):
    from app import __version__

    assert _field(deb_file, "Package") == "llm-workstation"
    assert _field(deb_file, "Version") == __version__
    depends = _field(deb_file, "Depends")
    assert re.search(r"libc6 \(>= 2\.\d+\)", depends)
    for lib in ("libxcb-cursor0", "libxcb-icccm4", "libxkbcommon-x11-0", "libfontconfig1", "libegl1"):
        assert lib in depends


def test_deb_lays_out_opt_bin_and_desktop_files(deb_file):
    listing = subprocess.run(["dpkg-deb", "--contents", str(deb_file)], capture_output=True, text=True).stdout
    assert "./opt/llm-workstation/llm-workstation\n" in listing
    assert re.search(r"\./usr/bin/llm-workstation -> \.\./\.\./opt/llm-workstation/llm-workstation", listing)
    assert f"./usr/share/applications/{DESKTOP_ID}.desktop" in listing
    assert f"./usr/share/metainfo/{DESKTOP_ID}.metainfo.xml" in listing
    assert "./opt/llm-workstation/_internal/app/resources/modelfiles/coding-assistant.Modelfile" in listing
    for size in ICON_SIZES:
        assert f"./usr/share/icons/hicolor/{size}x{size}/apps/{DESKTOP_ID}.png" in listing
    owners = {line.split()[1] for line in listing.splitlines()}
    assert owners == {"root/root"}  # --root-owner-group


def test_deb_carries_the_licence_in_its_copyright_file(deb_file, installed_root):
    """Debian's place for it: /usr/share/doc/<package>/copyright, with the MIT licence's full text."""
    listing = subprocess.run(["dpkg-deb", "--contents", str(deb_file)], capture_output=True, text=True).stdout
    assert "./usr/share/doc/llm-workstation/copyright\n" in listing
    text = (installed_root / "usr" / "share" / "doc" / "llm-workstation" / "copyright").read_text(encoding="utf-8")
    licence = text[text.index("MIT License\n") :]
    assert_is_the_licence(licence)
    assert text.startswith("llm-workstation\n") and "keeps its own licence" in text
    assert_is_the_licence((installed_root / "opt" / "llm-workstation" / "_internal" / "LICENSE").read_text())


def test_installed_launcher_runs_the_smoke_check(installed_root, bundle_env):
    launcher = installed_root / "usr" / "bin" / "llm-workstation"
    assert launcher.is_symlink()
    done = subprocess.run([str(launcher), "--smoke"], capture_output=True, text=True, env=bundle_env, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    version = subprocess.run([str(launcher), "--version"], capture_output=True, text=True, env=bundle_env)
    assert version.stdout.startswith("llm-workstation ")
    status = subprocess.run(
        ["dpkg-query", f"--admindir={installed_root}/var/lib/dpkg", "-W", "-f=${Status}", "llm-workstation"],
        capture_output=True,
        text=True,
    )
    assert status.stdout == "install ok installed"


def test_installed_desktop_entry_is_valid(installed_root):
    tool = shutil.which("desktop-file-validate")
    if tool is None:
        pytest.skip("desktop-file-validate is not installed (Debian: apt-get install desktop-file-utils)")
    entry = installed_root / "usr" / "share" / "applications" / f"{DESKTOP_ID}.desktop"
    done = subprocess.run([tool, str(entry)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def _soname_package(soname: str) -> str:
    """Debian's library package naming: libxcb-icccm.so.4 -> libxcb-icccm4, libX11-xcb.so.1 -> libx11-xcb1."""
    stem, version = soname.split(".so.")
    version = version.split(".")[0]
    return (stem + ("-" if stem[-1].isdigit() else "") + version).lower()


QT_FILES = (
    "PySide6/Qt/plugins/platforms/libqxcb.so",
    "libQt6XcbQpa.so.6",
    "libQt6Gui.so.6",
    "libQt6Widgets.so.6",
    "libQt6Core.so.6",
    "libQt6DBus.so.6",
)


def _needed(elf: Path) -> list[str]:
    dynamic = subprocess.run(["readelf", "-d", str(elf)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)


def _resolved(elf: Path, internal: Path) -> dict[str, str]:
    """soname -> path (or "not") as the bundle loads it (the bootloader puts _internal first)."""
    ldd = subprocess.run(["ldd", str(elf)], capture_output=True, text=True, env={"LD_LIBRARY_PATH": str(internal)})
    return {p[0]: p[2] for p in (line.split() for line in ldd.stdout.splitlines()) if len(p) >= 3 and p[1] == "=>"}


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) is not installed")
def test_depends_cover_what_qt_loads_from_the_system(deb_file, bundle_dir):
    """Every library the xcb plugin and the Qt libraries link directly that the bundle does not carry must come
    from a package in Depends (found with dpkg -S here, or by Debian's naming rule when not installed here)."""
    depends = {alt.split()[0] for item in _field(deb_file, "Depends").split(",") for alt in item.split("|")}
    internal = bundle_dir / "_internal"
    missing = set()
    for name in QT_FILES:
        elf = internal / name
        paths = _resolved(elf, internal)
        for soname in _needed(elf):
            target = paths.get(soname, "not")
            if target.startswith(str(bundle_dir)) or soname.startswith(("libQt6", "ld-linux")):  # ld-linux: libc6
                continue
            owner = subprocess.run(["dpkg", "-S", target], capture_output=True, text=True).stdout
            package = owner.split(":")[0] if target != "not" and owner else _soname_package(soname)
            if package not in depends:
                missing.add(f"{soname} ({package}, needed by {elf.name})")
    assert not missing, f"add to QT_XCB_DEPENDS: {sorted(missing)}"


def test_depends_are_real_debian_packages(deb_file):
    apt_cache = shutil.which("apt-cache")
    if apt_cache is None or subprocess.run([apt_cache, "show", "libc6"], capture_output=True).returncode != 0:
        pytest.skip("no apt package lists here (run apt-get update)")
    for item in _field(deb_file, "Depends").split(","):
        alternatives = [alt.split()[0] for alt in item.split("|")]
        found = [a for a in alternatives if subprocess.run([apt_cache, "show", a], capture_output=True).returncode == 0]
        assert found, f"no package named {alternatives} in this system's archive"


def test_dpkg_remove_takes_everything_away(installed_root, deb_file):
    done = subprocess.run(
        [
            "dpkg",
            f"--root={installed_root}",
            "--force-depends",
            "--force-script-chrootless",
            "--force-not-root",
            "-r",
            "llm-workstation",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (installed_root / "opt" / "llm-workstation").exists()
    assert not (installed_root / "usr" / "bin" / "llm-workstation").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux tarball")
def test_appimage_style_tarball_runs_from_anywhere(bundle_dir, bundle_env, tmp_path):
    tarball = load_script("linux_packages").build_tarball(bundle_dir, tmp_path / "out")
    with tarfile.open(tarball) as archive:
        archive.extractall(tmp_path / "unpacked", filter="tar")
    (top,) = (tmp_path / "unpacked").iterdir()
    assert (top / f"{DESKTOP_ID}.desktop").is_file() and (top / f"{DESKTOP_ID}.png").is_file()
    assert_is_the_licence((top / "LICENSE").read_text(encoding="utf-8"))
    done = subprocess.run([str(top / "AppRun"), "--smoke"], capture_output=True, text=True, env=bundle_env, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
