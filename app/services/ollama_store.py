"""Ollama's on-disk model store, read without an Ollama server.

Layout (``OLLAMA_MODELS``, default ``~/.ollama/models``)::

    manifests/<host>/<namespace>/<model>/<tag>   JSON: {"layers": [{"mediaType", "digest", "size"}, ...]}
    blobs/sha256-<hex>                           content-addressed files; the model layer is a GGUF

The model layer is the one with mediaType ``application/vnd.ollama.image.model``. Models from the default
registry and namespace show as ``name:tag`` (as ``ollama list`` does).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from app.services.library_files import WalkReport, walk_folders

MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
DEFAULT_REGISTRY = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")


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
            name = display_name(path.relative_to(manifests) if path.is_relative_to(manifests) else Path(path.name))
            models.append(_read_manifest(root, path, name))
    return models


def _read_manifest(root: Path, path: Path, name: str) -> OllamaStoreModel:
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return OllamaStoreModel(name, path, None, "The manifest vanished during the scan. Rescan.")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return OllamaStoreModel(name, path, None, f"Ollama's manifest for {name} is unreadable ({exc}). {_FIX}")
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    if not isinstance(layers, list):
        return OllamaStoreModel(name, path, None, f"Ollama's manifest for {name} has no layers. {_FIX}")
    model_layers = [x for x in layers if isinstance(x, dict) and x.get("mediaType") == MODEL_MEDIA_TYPE]
    if not model_layers:
        return OllamaStoreModel(name, path, None, f"Ollama's manifest for {name} has no model layer. {_FIX}")
    match = _DIGEST.match(str(model_layers[0].get("digest", "")))
    if match is None:
        return OllamaStoreModel(name, path, None, f"Ollama's manifest for {name} has a bad model digest. {_FIX}")
    blob = root / "blobs" / f"sha256-{match.group(1)}"
    if not blob.is_file():
        return OllamaStoreModel(name, path, blob, f"The model file of {name} is missing from Ollama's blobs. {_FIX}")
    return OllamaStoreModel(name, path, blob)


_FIX = "Pull it again with `ollama pull`, or remove it with `ollama rm`."
