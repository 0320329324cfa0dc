"""Everything the Models panel shows about one library entry: a human summary first (family, parameters,
quantization, size, context, licence), then all metadata and the full chat template.

Blocking (reads a GGUF header or an HF folder's JSON files): call it off the Qt thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core import safe_json
from app.core.gguf.header import GgufFileError, GgufHeader, read_gguf_header
from app.core.units import MISSING, format_bytes
from app.services.library.index import KIND_GGUF, LibraryEntry, human_count

MAX_SHOWN_VALUE_CHARS = 400


@dataclass
class EntryDetails:
    facts: list[tuple[str, str]] = field(default_factory=list)  # (label, value): the human summary
    metadata: list[tuple[str, str]] = field(default_factory=list)  # (key, value as text)
    chat_template: str | None = None
    header: GgufHeader | None = None  # GGUFs: for the memory estimate
    error: str | None = None


def entry_details(entry: LibraryEntry) -> EntryDetails:
    """Read the entry's metadata (never raises for a broken file: ``error`` says why)."""
    try:
        if entry.kind == KIND_GGUF:
            details = _gguf_details(Path(entry.path))
            details.facts = gguf_facts(entry, details.header)
            return details
        details = _hf_details(Path(entry.path))
        details.facts = hf_facts(entry, details.metadata)
        return details
    except (GgufFileError, ValueError) as exc:
        return EntryDetails(error=str(exc))
    except OSError as exc:
        return EntryDetails(error=f"Cannot read {entry.path}: {exc.strerror or exc}. Rescan the library.")


def _text(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False) if isinstance(value, (list, dict)) else str(value)
    except RecursionError:  # parsed, but one level too deep to print again from here
        return "(nested too deeply to show)"
    text = text.replace("\n", "⏎")
    return text if len(text) <= MAX_SHOWN_VALUE_CHARS else text[:MAX_SHOWN_VALUE_CHARS] + "…"


def _gguf_details(path: Path) -> EntryDetails:
    header = read_gguf_header(path)
    rows = [("file", str(path)), ("GGUF version", str(header.version)), ("tensors", f"{len(header.tensors):,}")]
    keys = sorted({*header.metadata, *header.array_lengths})
    for key in keys:
        if key == "tokenizer.chat_template":
            rows.append((key, "(shown under Chat template)"))
        elif key in header.metadata:
            rows.append((key, _text(header.metadata[key])))
        else:
            rows.append((key, f"[array of {header.array_lengths[key]:,} items]"))
    return EntryDetails(metadata=rows, chat_template=header.chat_template, header=header)


def _hf_details(folder: Path) -> EntryDetails:
    try:
        config = safe_json.load_file(folder / "config.json", what=f"{folder.name}/config.json")
    except safe_json.JsonError as exc:  # malformed, nested too deeply or too large
        raise ValueError(f"{exc}. Download the model again.") from None
    if not isinstance(config, dict):
        raise ValueError(f"{folder.name}/config.json is not a JSON object. Download the model again.")
    rows = [("folder", str(folder))]
    rows += [(f"config.{k}", _text(v)) for k, v in sorted(config.items())]
    weights = sorted(p.name for p in folder.glob("*.safetensors"))
    rows.append(("weights", ", ".join(weights)))
    return EntryDetails(metadata=rows, chat_template=_hf_chat_template(folder))


def _hf_chat_template(folder: Path) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    try:
        tokenizer_config = safe_json.load_file(folder / "tokenizer_config.json", what="tokenizer_config.json")
    except (OSError, ValueError):  # no template shown; the folder's other details still are
        return None
    template = tokenizer_config.get("chat_template") if isinstance(tokenizer_config, dict) else None
    if isinstance(template, list):  # named templates: [{"name": "default", "template": "..."}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) else None


def gguf_facts(entry: LibraryEntry, header: GgufHeader | None) -> list[tuple[str, str]]:
    """The summary a person reads first: family, parameters, quantization, size, context, licence, engine."""
    meta = header.metadata if header is not None else {}
    family = entry.family or entry.architecture
    if family and entry.architecture and family != entry.architecture:
        family = f"{family} ({entry.architecture})"
    size_label = meta.get("general.size_label")
    parameters = size_label if isinstance(size_label, str) and size_label else human_count(entry.parameter_count)
    template = "built in" if header is not None and header.chat_template else "none (a base model: it continues text)"
    return [
        ("Family", family or MISSING),
        ("Parameters", parameters or MISSING),
        ("Quantization", entry.quantization or MISSING),
        ("Size", format_bytes(entry.size_bytes)),
        ("Context", f"{entry.context_length:,} tokens" if entry.context_length else MISSING),
        ("Licence", entry.license or "not stated"),
        ("Chat template", template),
        ("Images", images_fact(entry)),
        ("Engine", entry.backend),
    ]


def images_fact(entry: LibraryEntry) -> str:
    """Whether the model reads images, with its projector, or what is missing or wrong with it."""
    if entry.vision and entry.projector:
        return f"yes, with {Path(entry.projector).name} ({format_bytes(entry.projector_bytes)})"
    return entry.projector_problem or "no (a text model)"


def hf_facts(entry: LibraryEntry, metadata: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The same summary for a Hugging Face-format folder (from its config.json)."""
    config = dict(metadata)
    return [
        ("Architecture", entry.architecture or MISSING),
        ("Parameters", human_count(entry.parameter_count) or MISSING),
        ("Weights", entry.quantization or MISSING),
        ("Size", format_bytes(entry.size_bytes)),
        ("Context", f"{entry.context_length:,} tokens" if entry.context_length else MISSING),
        ("Model type", config.get("config.model_type", MISSING).strip('"')),
        ("Engine", entry.backend),
    ]
