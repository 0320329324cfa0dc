"""The Hugging Face cache and Hugging Face-format model folders (config.json + safetensors, what vLLM serves).

Cache layout (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``)::

    models--<org>--<name>/refs/main                      the commit hash "main" points at
    models--<org>--<name>/snapshots/<commit>/<file>      symlinks into ../../blobs/<etag>
    models--<org>--<name>/blobs/<etag>                   the file contents

A file present in several snapshots is listed once, from the snapshot ``main`` points at, else the newest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core import safe_json
from app.services.library.files import FileStamp, WalkReport, safetensors_parameter_count, stamp, walk_folders

REPO_PREFIX = "models--"


@dataclass(frozen=True)
class HfCacheFile:
    repo_id: str
    relative: str  # the file's path inside the repository
    path: Path  # the snapshot path (a symlink into blobs/)


@dataclass(frozen=True)
class HfCacheRepo:
    repo_id: str
    gguf_files: tuple[HfCacheFile, ...]
    model_folder: Path | None  # a snapshot holding config.json + *.safetensors


def hf_hub_cache_dir() -> Path:
    """huggingface_hub's cache folder: where downloads land and the library looks, so the two always agree.

    Read from the environment now (huggingface_hub reads it once, at import) by huggingface_hub's rules:
    ``HF_HUB_CACHE``, the older ``HUGGINGFACE_HUB_CACHE``, ``HF_HOME/hub``, ``XDG_CACHE_HOME/huggingface/hub``,
    else ``~/.cache/huggingface/hub``; ``~`` and ``$VARIABLES`` are expanded. An empty variable counts as unset."""
    env = os.environ.get
    if cache := env("HF_HUB_CACHE") or env("HUGGINGFACE_HUB_CACHE"):
        return _expanded(cache)
    home = env("HF_HOME") or os.path.join(env("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface")
    return _expanded(home) / "hub"


def _expanded(path: str) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(path)))


def scan_hf_cache(root: Path, report: WalkReport) -> list[HfCacheRepo]:
    """The model repositories in the cache that hold GGUF files or a servable model folder."""
    try:
        repo_dirs = sorted(p for p in root.iterdir() if p.name.startswith(REPO_PREFIX) and p.is_dir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        report.problems.append(f"Cannot read the Hugging Face cache {root}: {exc.strerror or exc}.")
        return []
    repos = [_scan_repo(d, report) for d in repo_dirs]
    return [r for r in repos if r.gguf_files or r.model_folder]


def _repo_id(folder: Path) -> str:
    return folder.name.removeprefix(REPO_PREFIX).replace("--", "/", 1)


def _snapshots_newest_first(repo_dir: Path) -> list[Path]:
    snapshots = repo_dir / "snapshots"
    try:
        found = [p for p in snapshots.iterdir() if p.is_dir()]
    except OSError:
        return []
    try:
        main = (repo_dir / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        main = ""

    def order(p: Path) -> tuple[bool, int]:
        st = stamp(p)
        return (p.name != main, -(st.mtime_ns if st else 0))

    return sorted(found, key=order)


def _scan_repo(repo_dir: Path, report: WalkReport) -> HfCacheRepo:
    repo_id = _repo_id(repo_dir)
    files: dict[str, HfCacheFile] = {}
    model_folder: Path | None = None
    for snapshot in _snapshots_newest_first(repo_dir):
        for folder, entries in walk_folders(snapshot, report):
            names = {e.name for e in entries}
            if model_folder is None and is_model_folder_listing(names):
                model_folder = folder
            for entry in entries:
                if not entry.name.lower().endswith(".gguf"):
                    continue
                relative = Path(entry.path).relative_to(snapshot).as_posix()
                if relative not in files and Path(entry.path).exists():  # a dangling link: its blob is gone
                    files[relative] = HfCacheFile(repo_id, relative, Path(entry.path))
    return HfCacheRepo(repo_id, tuple(files[k] for k in sorted(files)), model_folder)


def is_model_folder_listing(names: set[str]) -> bool:
    """A Hugging Face-format model: a config.json next to safetensors weights."""
    return "config.json" in names and any(n.endswith(".safetensors") for n in names)


def model_folder_stamp(folder: Path) -> FileStamp | None:
    """A folder's combined (size, mtime_ns) over config.json and its weights: changes when any of them does."""
    parts = [folder / "config.json", *sorted(folder.glob("*.safetensors"))]
    stamps = [stamp(p) for p in parts]
    if any(s is None for s in stamps):
        return None
    return FileStamp(sum(s.size_bytes for s in stamps if s), max(s.mtime_ns for s in stamps if s))


def model_folder_summary(folder: Path) -> dict[str, Any]:
    """Architecture, parameters, quantization and context of an HF-format folder, from headers only."""
    try:
        config = safe_json.load_file(folder / "config.json", what="the file")
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:  # ValueError: safe_json's JsonError (malformed, nested, too large)
        return {"error": f"{folder.name}/config.json is unreadable ({exc}). Download the model again."}
    text_config = config.get("text_config")
    text: dict[str, Any] = text_config if isinstance(text_config, dict) else {}
    architectures = config.get("architectures") or []
    quant = config.get("quantization_config")
    try:
        parameters = sum(safetensors_parameter_count(p) for p in sorted(folder.glob("*.safetensors")))
    except (OSError, ValueError) as exc:
        return {"architecture": _first(architectures) or config.get("model_type"), "error": str(exc)}
    return {
        "name": folder.name,
        "architecture": _first(architectures) or config.get("model_type"),
        "parameter_count": parameters or None,
        "quantization": (quant.get("quant_method") if isinstance(quant, dict) else None)
        or config.get("torch_dtype")
        or config.get("dtype"),
        "context_length": config.get("max_position_embeddings") or text.get("max_position_embeddings"),
        "vision": isinstance(config.get("vision_config"), dict),
        "error": None,
    }


def _first(values: Any) -> str | None:
    return str(values[0]) if isinstance(values, list) and values else None
