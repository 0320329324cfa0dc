"""Vision projectors (``mmproj`` GGUFs) and the models they belong to.

A vision model in GGUF form is two files: the language model and a projector (``general.architecture`` "clip")
that turns an image into embeddings the language model reads. The projector belongs to the model when its
output size (``clip.vision.projection_dim``) equals the model's ``<arch>.embedding_length``, and it can read
images when it has a vision encoder of a type llama.cpp knows. Pairing looks next to the model: its folder, and
in a Hugging Face cache snapshot, the folders up to the snapshot's root (links into ``blobs/`` are not resolved,
so the snapshot's own layout decides). Headers only: no tensor data is read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from app.core.gguf.header import GgufFileError, GgufHeader, read_gguf_header
from app.core.gguf.quant_names import parse_quant

PROJECTOR_ARCHITECTURE = "clip"
NAME_MARK = "mmproj"
# llama.cpp's projector types (gguf's VisionProjectorType, plus the names older converters wrote).
LEGACY_PROJECTOR_TYPES = frozenset(
    {"mlp", "mlp_norm", "ldp", "ldpv2", "resampler", "adapter", "merger", "gemma3", "idefics3", "pixtral",
     "qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger", "internvl", "llama4", "kimivl", "lfm2", "cogvlm",
     "janus_pro", "phi4", "step3vl", "glm4v", "paddleocr", "lightonocr"}
)  # fmt: skip
AUDIO_ONLY_TYPES = frozenset({"ultravox", "qwen2a", "qwen3a", "voxtral", "whisper", "glma", "musicflamingo", "lfm2a"})
# Architectures that are vision models by design (their text GGUF is useless for images without a projector).
VISION_ARCHITECTURES = frozenset({"qwen2vl", "qwen3vl", "qwen3vlmoe", "glm4v", "glm4v_moe"})
_VISION_NAME = re.compile(r"(?:^|[\W_])(?:vl|vision|llava|mmproj|multimodal)(?:$|[\W_\d])", re.IGNORECASE)
_PREFERRED_PRECISION = ("f16", "bf16", "f32", "q8_0")
_LATER_SHARD = re.compile(r"-(?!0*1-)\d{5}-of-\d{5}\.gguf$")


@dataclass(frozen=True)
class ProjectorFacts:
    """What a projector GGUF says about itself."""

    path: str
    projector_type: str | None
    vision: bool  # it has a vision encoder
    audio: bool
    output_size: int | None  # the embedding size it produces: the language model's embedding_length
    size_bytes: int


@dataclass(frozen=True)
class Pairing:
    """A model's projector: ``projector`` is the file to load (None: none usable), ``problem`` says in plain words
    what is missing or wrong when the model looks like a vision model or a projector was found but does not fit."""

    projector: str | None = None
    problem: str | None = None
    size_bytes: int = 0

    @property
    def vision(self) -> bool:
        return self.projector is not None


def is_projector(header: GgufHeader) -> bool:
    return header.architecture == PROJECTOR_ARCHITECTURE


def looks_like_projector_name(name: str) -> bool:
    return NAME_MARK in name.lower() and name.lower().endswith(".gguf")


def projector_facts(header: GgufHeader) -> ProjectorFacts:
    meta = header.metadata
    kind = meta.get("clip.vision.projector_type") or meta.get("clip.projector_type")
    vision = _flag(meta.get("clip.has_vision_encoder"), default=any(k.startswith("clip.vision.") for k in meta))
    audio = _flag(meta.get("clip.has_audio_encoder"), default=False)
    output = meta.get("clip.vision.projection_dim")
    return ProjectorFacts(
        path=str(header.path),
        projector_type=str(kind) if kind else None,
        vision=vision,
        audio=audio,
        output_size=int(output) if isinstance(output, int) and output > 0 else None,
        size_bytes=header.file_size,
    )


def _flag(value: object, *, default: bool) -> bool:
    return bool(value) if isinstance(value, bool | int) else default


def known_projector_types() -> frozenset[str]:
    try:
        from gguf.constants import VisionProjectorType
    except ImportError:  # gguf is a dependency; a broken install falls back to the built-in list
        return LEGACY_PROJECTOR_TYPES
    names = {str(v) for k, v in vars(VisionProjectorType).items() if not k.startswith("_")}
    return LEGACY_PROJECTOR_TYPES | names


def projector_problem(model: GgufHeader, projector: ProjectorFacts) -> str | None:
    """Why ``projector`` cannot serve ``model`` (in words), or None when it fits."""
    width = model.arch_value("embedding_length")
    return problem_for_width(width if isinstance(width, int) else None, projector)


def problem_for_width(width: int | None, projector: ProjectorFacts) -> str | None:
    """Why ``projector`` cannot serve a model whose embeddings are ``width`` wide (None: unknown), or None."""
    name = os.path.basename(projector.path)
    if not projector.vision:
        if projector.audio:
            return f"{name} is a projector for audio, not for images; this model cannot read images with it."
        return f"{name} has no vision encoder, so this model cannot read images with it."
    kind = projector.projector_type
    if kind is not None and kind not in known_projector_types() and kind not in AUDIO_ONLY_TYPES:
        return (
            f"{name} is a '{kind}' projector, a type this version of llama.cpp does not know. "
            "Update llama-cpp-python, or use a projector converted for it."
        )
    if projector.output_size and width and projector.output_size != width:
        return (
            f"{name} belongs to another model: it produces {projector.output_size:,}-wide embeddings but this "
            f"model reads {width:,}. Download the mmproj file from this model's own repository."
        )
    return None


def looks_like_vision_model(architecture: str | None, general_name: str | None, path: str | Path) -> bool:
    """A model that is meant to read images (by architecture or by name), so a missing projector is worth saying."""
    if architecture in VISION_ARCHITECTURES:
        return True
    return any(_VISION_NAME.search(n) for n in (general_name or "", Path(path).name))


def pair_projector(model_path: str | Path, model: GgufHeader, repo_id: str | None = None) -> Pairing:
    """The projector for the model at ``model_path`` (found next to it), or what is missing or wrong."""
    found = [f for f in (_facts(p) for p in candidate_files(model_path)) if f is not None]
    width = model.arch_value("embedding_length")
    name = model.metadata.get("general.name")
    seen_as_vision = looks_like_vision_model(model.architecture, str(name) if name else None, model_path)
    alone = alone_in_folder(Path(model_path))
    return choose(model_path, width if isinstance(width, int) else None, found, seen_as_vision, alone, repo_id)


def choose(
    model_path: str | Path,
    width: int | None,
    found: list[ProjectorFacts],
    seen_as_vision: bool,
    alone: bool,
    repo_id: str | None,
) -> Pairing:
    """The best of the projectors ``found`` next to a model whose embeddings are ``width`` wide. They are the
    model's own when it is a vision model by name or architecture, or the only model in its folder; otherwise
    only a projector whose name carries the model's family name is taken."""
    mine = found if seen_as_vision or alone else [f for f in found if _related(model_path, f.path)]
    fitting = [f for f in mine if problem_for_width(width, f) is None]
    if fitting:
        best = min(fitting, key=lambda f: _preference(f.path, model_path))
        return Pairing(best.path, None, best.size_bytes)
    if mine:  # a projector meant for this model that does not fit
        return Pairing(None, problem_for_width(width, mine[0]))
    if seen_as_vision:
        return Pairing(None, missing_message(repo_id))
    return Pairing()


def alone_in_folder(model_path: Path) -> bool:
    """No other model GGUF (projectors and later shards aside) shares the model's folder."""
    try:
        names = os.listdir(os.path.dirname(os.path.abspath(model_path)))
    except OSError:
        return True
    others = [n for n in names if is_model_file_name(n) and n != model_path.name]
    return not others


def is_model_file_name(name: str) -> bool:
    """A GGUF that may be a model: not a projector, not a later shard of a split model."""
    lower = name.lower()
    return lower.endswith(".gguf") and NAME_MARK not in lower and not _LATER_SHARD.search(lower)


def missing_message(repo_id: str | None) -> str:
    where = f"the same repository ({repo_id})" if repo_id else "the same repository as the model"
    return (
        "This model can read images but its projector file is missing: download the mmproj-….gguf file from "
        f"{where} into the model's folder."
    )


def candidate_files(model_path: str | Path) -> list[Path]:
    """``*mmproj*.gguf`` files next to the model (and, in an HF cache snapshot, in its folders up to the root)."""
    found: list[Path] = []
    for folder in search_folders(Path(model_path)):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        found += [folder / n for n in names if looks_like_projector_name(n) and (folder / n).is_file()]
    return found


def search_folders(model_path: Path) -> Iterable[Path]:
    """The model's folder, then (inside ``…/snapshots/<revision>/``) each parent up to the snapshot root; outside
    the cache, the parent of a folder named for a quantization (a repository's ``Q4_K_M/``, downloaded as is)."""
    folder = Path(os.path.abspath(model_path)).parent
    yield folder
    parts = folder.parts
    if "snapshots" not in parts:
        if parse_quant(folder.name + ".gguf") is not None and folder.parent != folder:
            yield folder.parent
        return
    root_depth = len(parts) - parts[::-1].index("snapshots") + 1  # …/snapshots/<revision>
    while len(folder.parts) > root_depth:
        folder = folder.parent
        yield folder


def _related(model_path: str | Path, projector_path: str) -> bool:
    """The projector's name carries the model's family name ("gemma" in mmproj-gemma-3-4b-f16.gguf)."""
    family = next((w for w in _words(Path(model_path).stem) if len(w) >= 3 and w.isalpha()), None)
    return family is not None and family in _words(Path(projector_path).stem)


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]


def _facts(path: Path) -> ProjectorFacts | None:
    try:
        header = read_gguf_header(path)
    except (GgufFileError, OSError):
        return None
    return projector_facts(header) if is_projector(header) else None


def _preference(projector_path: str, model_path: str | Path) -> tuple[int, int, str]:
    """Same folder first, then full precision (F16 is what most repositories ship as the reference), then name."""
    name = os.path.basename(projector_path).lower()
    same_folder = os.path.dirname(projector_path) == os.path.dirname(os.path.abspath(model_path))
    rank = next((i for i, p in enumerate(_PREFERRED_PRECISION) if p in name), len(_PREFERRED_PRECISION))
    return (0 if same_folder else 1, rank, name)
