"""Ollama's on-disk model store, read without an Ollama server.

Layout (``OLLAMA_MODELS``, default ``~/.ollama/models``)::

    manifests/<host>/<namespace>/<model>/<tag>   JSON: {"layers": [{"mediaType", "digest", "size"}, ...]}
    blobs/sha256-<hex>                           content-addressed files; the model layer is a GGUF

The model layer is the one with mediaType ``application/vnd.ollama.image.model``. Models from the default
registry and namespace show as ``name:tag`` (as ``ollama list`` does).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.core import remote_paths as rp
from app.core.safe_json import load_file
from app.services.library.files import WalkReport, walk_folders

MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
DEFAULT_REGISTRY = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
MAX_MANIFEST_BYTES = 1 << 20  # a manifest lists a handful of layers: a few kB


@dataclass(frozen=True)
class OllamaStoreModel:
    name: str  # "llama3.2:latest"
    manifest_path: Path
    blob_path: Path | None  # the GGUF; None when the manifest is broken
    error: str | None = None


def ollama_models_dir() -> Path:
    """Where Ollama keeps its models: ``OLLAMA_MODELS``, else ``~/.ollama/models``."""
    configured = os.environ.get("OLLAMA_MODELS")
    return Path(configured).expanduser() if configured else Path.home() / ".ollama" / "models"


def display_name(relative: Path) -> str:
    """``registry.ollama.ai/library/llama3.2/latest`` → ``llama3.2:latest``; other namespaces keep theirs."""
    parts = relative.parts
    *prefix, model, tag = parts if len(parts) >= 2 else ("", *parts)
    if prefix[:1] == [DEFAULT_REGISTRY]:
        prefix = prefix[1:]
        if prefix == [DEFAULT_NAMESPACE]:
            prefix = []
    return "/".join([*prefix, model]) + f":{tag}"


def scan_ollama_store(root: Path, report: WalkReport) -> list[OllamaStoreModel]:
    """Every manifest under ``root/manifests``; a broken one is listed with its error, never skipped silently."""
    manifests = root / "manifests"
    if not manifests.is_dir():
        return []
    models: list[OllamaStoreModel] = []
    for _folder, entries in walk_folders(manifests, report):
        for entry in entries:
            try:
                if not entry.is_file():
                    continue
            except OSError:
                continue
            path = Path(entry.path)
            relative = path.relative_to(manifests) if path.is_relative_to(manifests) else Path(path.name)
            models.append(_model(root, path, relative))
    return models


def _model(root: Path, path: Path, relative: Path) -> OllamaStoreModel:
    """The model a manifest names; its path pieces must be valid name parts (they name the model)."""
    try:
        for piece in relative.parts:
            rp.ollama_name_piece(piece)
    except rp.RemotePathError as exc:
        return OllamaStoreModel(rp.shown(display_name(relative)), path, None, f"{exc}.")
    return _read_manifest(root, path, display_name(relative))


def _read_manifest(root: Path, path: Path, name: str) -> OllamaStoreModel:
    try:
        manifest = load_file(path, what=f"Ollama's manifest for {name}", max_bytes=MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return OllamaStoreModel(name, path, None, "The manifest vanished during the scan. Rescan.")
    except (OSError, ValueError) as exc:  # safe_json's JsonError and user_files' errors are ValueErrors
        return OllamaStoreModel(name, path, None, f"Ollama's manifest for {name} is unreadable ({exc}). {_FIX}")
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    if not isinstance(layers, list):
        return OllamaStoreModel(name, path, None, f"Ollama's manifest for {name} has no layers. {_FIX}")
    model_layers = [x for x in layers if isinstance(x, dict) and x.get("mediaType") == MODEL_MEDIA_TYPE]
    if not model_layers:
        return OllamaStoreModel(name, path, None, f"Ollama's manifest for {name} has no model layer. {_FIX}")
    blobs = root / "blobs"
    try:
        blob = blobs / f"sha256-{rp.ollama_digest(model_layers[0].get('digest'))}"
        rp.inside(blobs, blob)
    except rp.RemotePathError as exc:
        return OllamaStoreModel(name, path, None, f"Ollama's manifest for {name} has a bad model digest: {exc}.")
    if not blob.is_file():
        return OllamaStoreModel(name, path, blob, f"The model file of {name} is missing from Ollama's blobs. {_FIX}")
    return OllamaStoreModel(name, path, blob)


_FIX = "Pull it again with `ollama pull`, or remove it with `ollama rm`."
