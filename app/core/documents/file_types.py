"""Which files the document index reads, by extension, and which folders it never enters."""

from __future__ import annotations

from pathlib import PurePath

PDF, DOCX, MARKDOWN, TEXT, HTML, CODE = "pdf", "docx", "markdown", "text", "html", "code"

_KINDS: dict[str, str] = {
    ".pdf": PDF,
    ".docx": DOCX,
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".txt": TEXT,
    ".text": TEXT,
    ".rst": TEXT,
    ".log": TEXT,
    ".csv": TEXT,
    ".html": HTML,
    ".htm": HTML,
    ".xhtml": HTML,
}
_CODE_EXTENSIONS = [
    ".py",
    ".pyi",
    ".c",
    ".h",
    ".cc",
    ".cpp",
    ".hpp",
    ".cxx",
    ".rs",
    ".go",
    ".java",
    ".kt",
    ".kts",
    ".js",
    ".mjs",
    ".cjs",
    ".ts",
    ".tsx",
    ".jsx",
    ".rb",
    ".php",
    ".cs",
    ".swift",
    ".m",
    ".mm",
    ".scala",
    ".sh",
    ".bash",
    ".zsh",
    ".fish",
    ".ps1",
    ".lua",
    ".pl",
    ".r",
    ".sql",
    ".toml",
    ".yaml",
    ".yml",
    ".json",
    ".ini",
    ".cfg",
    ".xml",
    ".css",
    ".scss",
    ".vue",
    ".svelte",
    ".dart",
    ".hs",
    ".ml",
    ".ex",
    ".exs",
    ".erl",
    ".clj",
    ".zig",
    ".nim",
    ".jl",
    ".tex",
    ".cmake",
    ".gradle",
    ".proto",
]
_KINDS.update(dict.fromkeys(_CODE_EXTENSIONS, CODE))
_KINDS_BY_NAME = {"makefile": CODE, "dockerfile": CODE, "readme": TEXT, "license": TEXT}

DOCUMENT_EXTENSIONS: frozenset[str] = frozenset(_KINDS)
# Folders a recursive add never enters: version control, dependencies, caches, build output.
IGNORED_DIRS: frozenset[str] = frozenset(
    [
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".idea",
        ".vscode",
        "dist",
        "build",
        "target",
        ".cache",
        ".next",
        ".gradle",
    ]
)


def document_kind(path: PurePath, extensions: frozenset[str] | None = None) -> str | None:
    """The parser kind for ``path`` ("pdf", "docx", "markdown", "text", "html", "code"), or None for a file the
    index does not read; ``extensions`` (lower case, with the dot) narrows the accepted types."""
    suffix = path.suffix.lower()
    if extensions is not None and suffix not in extensions:
        return None
    return _KINDS.get(suffix) or (None if suffix else _KINDS_BY_NAME.get(path.name.lower()))


def parse_extensions(text: str) -> frozenset[str]:
    """``"pdf, .md"`` → ``{".pdf", ".md"}``."""
    items = (item.strip().lower() for item in text.replace(";", ",").split(","))
    return frozenset(item if item.startswith(".") else f".{item}" for item in items if item)


def is_ignored_dir(name: str) -> bool:
    """Hidden folders and the ones in :data:`IGNORED_DIRS`."""
    return name.startswith(".") or name in IGNORED_DIRS
