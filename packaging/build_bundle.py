"""Build the one-folder app with PyInstaller: ``dist/llm-workstation/llm-workstation`` (``.exe`` on Windows; on
macOS also ``dist/LLM Workstation.app``). Run it with the app's own environment, where llama-cpp-python is
built the way the bundle should run (CPU, or CUDA/Metal: see packaging/README.md):

    .venv/bin/python packaging/build_bundle.py [--dist DIR] [--work DIR]
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "packaging" / "llm-workstation.spec"
NAME = "llm-workstation"


def build(dist: Path, work: Path) -> Path:
    """Run PyInstaller on the spec; return the bundle folder. Raises CalledProcessError when it fails."""
    command = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN"]
    command += ["--distpath", str(dist), "--workpath", str(work), str(SPEC)]
    subprocess.run(command, cwd=ROOT, check=True)
    bundle = dist / NAME
    if os.name == "posix":
        link_duplicate_libraries(bundle)
    return bundle


def link_duplicate_libraries(bundle: Path) -> int:
    """llama_cpp/lib holds libX.so and libX.so.0 as two copies of one file (wheels cannot hold symlinks):
    make libX.so a relative symlink to libX.so.0. Returns the bytes saved."""
    saved = 0
    for lib_dir in bundle.glob("_internal/llama_cpp/lib"):
        for plain in lib_dir.glob("*.so"):
            versioned = sorted(lib_dir.glob(plain.name + ".*"), key=lambda p: len(p.name))
            if plain.is_symlink() or not versioned or not filecmp.cmp(plain, versioned[0], shallow=False):
                continue
            saved += plain.stat().st_size
            plain.unlink()
            plain.symlink_to(versioned[0].name)
    return saved


def folder_bytes(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="output folder (default: ./dist)")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "pyinstaller", help="PyInstaller's work folder")
    args = parser.parse_args()
    started = time.monotonic()
    try:
        bundle = build(args.dist.absolute(), args.work.absolute())
    except subprocess.CalledProcessError as exc:
        print(f"build_bundle: PyInstaller failed (exit {exc.returncode}); its output is above", file=sys.stderr)
        return 1
    size_mb = folder_bytes(bundle) / 2**20
    print(f"built {bundle} ({size_mb:.0f} MiB) in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
