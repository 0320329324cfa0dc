"""One name for a model everywhere: the GGUF's ``general.name`` when it has one, else the file's stem.

"Gemma 3 270m" in a header shows as "Gemma 3 270M" (a size label's unit in capitals, as model cards write it); a
file without a name shows as its stem (``tiny-q4_k_m``, a split file without its ``-00001-of-00003`` part). The
file name itself is secondary text (a row's second line, a tooltip).
"""

from __future__ import annotations

import re
from pathlib import Path

_SIZE_LABEL = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)([kmbt])(?!\w)")
_SPLIT_SUFFIX = re.compile(r"-\d{5}-of-\d{5}$", re.IGNORECASE)


def model_display_name(general_name: object, path: str | Path) -> str:
    """The name a model shows under in every page: ``general.name`` (its size label's unit in capitals), else
    the file's stem."""
    name = " ".join(general_name.split()) if isinstance(general_name, str) else ""
    if not name:
        return file_stem(path)
    return _SIZE_LABEL.sub(lambda m: m[1] + m[2].upper(), name)


def file_stem(path: str | Path) -> str:
    """``gemma-3-270m-q4_k_m.gguf`` → ``gemma-3-270m-q4_k_m``; a split file's first shard loses its part number."""
    name = Path(path).name
    stem = name[: -len(".gguf")] if name.lower().endswith(".gguf") else Path(name).stem or name
    return _SPLIT_SUFFIX.sub("", stem) or name
