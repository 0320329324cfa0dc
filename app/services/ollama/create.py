"""Creating an Ollama model from a parsed Modelfile, the way ``ollama create`` does it.

Ollama's ``/api/create`` no longer takes a Modelfile (the ``modelfile`` field was removed in 0.5.5 and is
ignored): the client parses it and sends structured fields. :func:`build_create_request` is Ollama's
``Modelfile.CreateRequest(relativeDir)`` plus the CLI's file naming (``cmd/cmd.go``):

- FROM / ADAPTER / DRAFT paths are expanded (``~``, ``~user``, relative to the Modelfile's folder); a
  directory is expanded to the files Ollama imports (``filesForModel`` in ``parser/parser.go``); every file
  is hashed (``sha256:<hex>``). Hashing blocks: call it in a thread (:func:`plan_create` does).
- File names sent to Ollama are relative to the files' common folder, or the base name for a single file.
- A FROM that is not an existing path is a model name (``from``) — except that a FROM which *looks* like a
  path (``/…``, ``./…``, ``../…``, ``~…``, ``….gguf``) and does not exist is an error here. Ollama's CLI would
  send it as a model name and fail on the server with a confusing "pull model manifest" error.
- PARAMETERs are typed (``format_params``), MESSAGEs split at the first ``": "``, LICENSEs become a list,
  REQUIRES must be a semantic version.

:func:`create_model` then uploads each file Ollama does not have (``HEAD`` then ``POST /api/blobs/:digest``)
and streams ``/api/create``; the model counts as created only when Ollama says ``success``.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import hashlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.errors import ErrorKind
from app.core.modelfile.params import REQUIRES_ERROR, format_params, valid_requires
from app.core.modelfile.parser import NON_PARAMETER_NAMES, Modelfile, ModelfileError
from app.services.ollama.client import OllamaError, OllamaService

# filesForModel's weight files, in the order it looks for them, with the content type each must have.
_WEIGHTS = (
    ("model*.safetensors", ""),  # some safetensors files are not sniffed as octet-stream: not checked
    ("consolidated*.safetensors", ""),
    ("pytorch_model*.bin", "application/zip"),
    ("consolidated*.pth", "application/zip"),
    ("*.gguf", "application/octet-stream"),
    ("*.bin", "application/octet-stream"),
)
_BINARY = frozenset([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20)])


class CreatePlanError(OllamaError):
    """The Modelfile cannot be turned into a create request; the message names the line or file at fault."""

    kind = ErrorKind.INVALID_INPUT


@dataclass(frozen=True)
class BlobFile:
    """A local file to send: ``name`` is what Ollama is told, ``path`` what is read."""

    name: str
    path: Path
    digest: str
    size: int


@dataclass
class CreatePlan:
    """The structured ``/api/create`` request for a Modelfile, with the local files it needs uploaded."""

    from_model: str | None = None
    files: list[BlobFile] = field(default_factory=list)
    adapters: list[BlobFile] = field(default_factory=list)
    draft_files: list[BlobFile] = field(default_factory=list)
    template: str | None = None
    system: str | None = None
    license: list[str] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, str]] = field(default_factory=list)
    requires: str | None = None
    renderer: str | None = None
    parser: str | None = None
    warnings: list[str] = field(default_factory=list)

    def blobs(self) -> list[BlobFile]:
        """Every file to upload, once per digest."""
        seen: dict[str, BlobFile] = {}
        for blob in [*self.files, *self.adapters, *self.draft_files]:
            seen.setdefault(blob.digest, blob)
        return list(seen.values())

    def request(self, model: str, *, quantize: str | None = None) -> dict[str, Any]:
        """The JSON body for ``/api/create`` (empty values omitted, as Go's ``omitempty`` does)."""
        body: dict[str, Any] = {"model": model}
        if self.from_model:
            body["from"] = self.from_model
        for key, group in (("files", self.files), ("adapters", self.adapters), ("draft_files", self.draft_files)):
            if group:
                body[key] = {blob.name: blob.digest for blob in group}
        for key in ("template", "system", "requires", "renderer", "parser"):
            if getattr(self, key):
                body[key] = getattr(self, key)
        if self.license:
            body["license"] = list(self.license)
        if self.parameters:
            body["parameters"] = dict(self.parameters)
        if self.messages:
            body["messages"] = [dict(m) for m in self.messages]
        if quantize:
            body["quantize"] = quantize
        return body


@dataclass(frozen=True)
class CreateProgress:
    """One create update: uploading a file (``phase="upload"``) or Ollama's own status (``"create"``)."""

    phase: str
    status: str
    completed: int = 0
    total: int = 0
    digest: str | None = None

    @property
    def done(self) -> bool:
        return self.phase == "create" and self.status == "success"


# --- the plan -------------------------------------------------------------------------------------------------
def build_create_request(modelfile: Modelfile, modelfile_dir: Path) -> CreatePlan:
    """Ollama's ``Modelfile.CreateRequest(relativeDir)``; blocking (hashes files): run it off the event loop."""
    plan = CreatePlan()
    files: dict[str, tuple[Path, str, int]] = {}
    adapters: dict[str, tuple[Path, str, int]] = {}
    drafts: dict[str, tuple[Path, str, int]] = {}
    model_paths: list[str] = []
    draft_paths: list[str] = []
    relative_dir = str(modelfile_dir)
    for command in modelfile.commands:
        name, args = command.name, command.args
        if name == "model":
            path = expand_path(args, relative_dir)
            if not os.path.exists(path):
                if looks_like_path(args):
                    raise CreatePlanError(
                        f"FROM {args}: {path} does not exist. Fix the path (relative paths start at the "
                        f"Modelfile's folder, {relative_dir}). Ollama's own CLI would send this to the server "
                        "as a model name instead and fail there."
                    )
                plan.from_model = args
                continue
            _reject_same_path("DRAFT", path, draft_paths)
            model_paths.append(path)
            files.update(file_digest_map(path))
        elif name == "draft":
            path = _existing(expand_path(args, relative_dir), "DRAFT", args)
            _reject_same_path("DRAFT", path, model_paths)
            draft_paths.append(path)
            drafts.update(file_digest_map(path))
        elif name == "adapter":
            adapters = file_digest_map(_existing(expand_path(args, relative_dir), "ADAPTER", args))
        elif name in ("template", "system", "renderer", "parser"):
            setattr(plan, name, args)
        elif name == "license":
            plan.license.append(args)
        elif name == "requires":
            plan.requires = _requires(args)
        elif name == "message":
            role, _, content = args.partition(": ")
            plan.messages.append({"role": role, "content": content})
        elif name not in NON_PARAMETER_NAMES:
            _add_parameter(plan, name, args)
    plan.files = _blob_files(files)
    plan.adapters = _blob_files(adapters)
    plan.draft_files = _blob_files(drafts)
    return plan


async def plan_create(modelfile: Modelfile, modelfile_dir: Path) -> CreatePlan:
    """:func:`build_create_request` in a worker thread, so hashing large files does not block the loop."""
    return await asyncio.to_thread(build_create_request, modelfile, modelfile_dir)


def looks_like_path(arg: str) -> bool:
    """Whether a FROM argument is meant as a file: a missing one is then an error, not a model name."""
    return (
        arg in (".", "..")
        or arg.startswith(("/", "./", "../", "~", "\\", ".\\", "..\\"))
        or os.path.isabs(arg)
        or arg.lower().endswith(".gguf")
    )


def expand_path(path: str, relative_dir: str) -> str:
    """Ollama's ``expandPath``: absolute as is, ``~``/``~user`` from the home folder, else from ``relative_dir``."""
    if os.path.isabs(path) or path.startswith(("/", "\\")):
        return os.path.abspath(path)
    if path.startswith("~"):
        expanded = os.path.expanduser(path)
        if expanded == path or expanded.startswith("~"):
            user = path[1:].split("/", 1)[0]
            raise CreatePlanError(f"Cannot expand {path}: there is no user '{user}' on this machine.")
        return os.path.abspath(expanded)
    return os.path.abspath(os.path.join(relative_dir, path))


def file_digest_map(path: str) -> dict[str, tuple[Path, str, int]]:
    """``{source path: (file to read, "sha256:<hex>", size)}`` for a file, or for a model folder's files."""
    try:
        if not os.path.isdir(path):
            real = Path(os.path.realpath(path))
            return {path: (real, file_digest(real), real.stat().st_size)}
        folder = os.path.realpath(path)
        found: dict[str, tuple[Path, str, int]] = {}
        for file in files_for_model(folder):
            target = os.path.realpath(file)
            rel = os.path.relpath(target, folder)
            if os.path.isabs(rel) or rel == ".." or rel.startswith(".." + os.sep):
                hint = ""
                if ".cache" in rel:
                    hint = (
                        " (a Hugging Face cache folder links outside itself: download the model to a folder of its own)"
                    )
                raise CreatePlanError(f"{file} points outside {path}{hint}; Ollama refuses such files.")
            found[target] = (Path(target), file_digest(Path(target)), os.path.getsize(target))
        return found
    except OSError as exc:
        raise CreatePlanError(f"Cannot read {exc.filename or path}: {exc.strerror or exc}.") from exc


def file_digest(path: Path) -> str:
    with path.open("rb") as handle:
        return "sha256:" + hashlib.file_digest(handle, "sha256").hexdigest()


def files_for_model(folder: str) -> list[str]:
    """The files Ollama imports from a model folder (``filesForModel`` in ollama's parser/parser.go)."""

    def glob_files(pattern: str, content_type: str = "") -> list[str]:
        matches = sorted(
            m for m in glob.glob(os.path.join(glob.escape(folder), pattern), include_hidden=True) if os.path.isfile(m)
        )
        for match in matches:
            if content_type and (found := _content_type(match)) != content_type:
                raise CreatePlanError(f"{match} is not what Ollama expects ({found}, not {content_type}).")
        return matches

    def maybe(pattern: str, content_type: str = "") -> list[str]:  # Go ignores these globs' errors
        with contextlib.suppress(CreatePlanError):
            return glob_files(pattern, content_type)
        return []

    files: list[str] = []
    for pattern, content_type in _WEIGHTS:
        if weights := maybe(pattern, content_type):
            files += weights
            if pattern == "model*.safetensors":
                files += glob_files(os.path.join("*", "model*.safetensors"))
            break
    else:
        raise CreatePlanError(
            f"No model files in {folder}: Ollama imports *.safetensors, pytorch_model*.bin, consolidated*.pth, "
            "*.gguf or *.bin (GGUF) files."
        )
    files += glob_files("*.json", "text/plain")
    files += glob_files(os.path.join("*", "*.json"), "text/plain")  # Go's "**" is one folder level
    files += glob_files("chat_template.jinja", "text/plain")
    if tokenizer := maybe("tokenizer.model", "application/octet-stream"):
        files += tokenizer
    else:
        files += maybe(os.path.join("*", "tokenizer.model"), "text/plain")
    return files


def request_file_names(paths: list[str]) -> dict[str, str]:
    """The CLI's ``createRequestFileNames``: relative to the common folder (2+ files), else the base name."""
    root = _common_root(paths)
    names = {}
    for path in paths:
        name = os.path.basename(path)
        if root is not None:
            rel = os.path.relpath(os.path.abspath(path), root)
            if rel not in (".", "..") and not rel.startswith(".." + os.sep):
                name = rel
        names[path] = os.path.normpath(name).replace(os.sep, "/")
    return names


# --- creating -------------------------------------------------------------------------------------------------
async def create_model(
    service: OllamaService,
    name: str,
    plan: CreatePlan,
    progress: Callable[[CreateProgress], None],
    *,
    quantize: str | None = None,
) -> None:
    """Upload the plan's files Ollama lacks, then create ``name``; returns only after Ollama says "success".

    Raises OllamaError (an error line, a refused request, a dropped connection, a stream without "success").
    """
    name = name.strip()
    if not name:
        raise OllamaError("Enter a name for the new model, for example my-assistant.", kind=ErrorKind.INVALID_INPUT)
    for blob in plan.blobs():
        if await service.has_blob(blob.digest):
            progress(CreateProgress("upload", f"using existing file {blob.name}", blob.size, blob.size, blob.digest))
            continue
        progress(CreateProgress("upload", f"copying file {blob.name}", 0, blob.size, blob.digest))

        def uploaded(sent: int, blob: BlobFile = blob) -> None:
            progress(CreateProgress("upload", f"copying file {blob.name}", sent, blob.size, blob.digest))

        await service.upload_blob(blob.path, blob.digest, blob.size, uploaded)
    succeeded = False

    def on_line(line: dict[str, Any]) -> None:
        nonlocal succeeded
        status = str(line.get("status") or "")
        completed, total = int(line.get("completed") or 0), int(line.get("total") or 0)
        progress(CreateProgress("create", status, completed, total, line.get("digest") or None))
        succeeded = succeeded or status == "success"

    await service.stream_json("/api/create", plan.request(name, quantize=quantize), f"creating {name}", on_line)
    if not succeeded:
        raise OllamaError(f"Ollama stopped creating {name} before it finished. Try again.")


# --- helpers --------------------------------------------------------------------------------------------------
def _existing(path: str, command: str, args: str) -> str:
    if not os.path.exists(path):
        raise CreatePlanError(f"{command} {args}: {path} does not exist.")
    return path


def _reject_same_path(command: str, path: str, others: list[str]) -> None:
    for other in others:
        if os.path.realpath(path) == os.path.realpath(other):
            raise CreatePlanError(f"{command} must not reference the same local path as FROM: {path}")


def _requires(args: str) -> str:
    if not valid_requires(args):
        raise CreatePlanError(f"REQUIRES {args}: {REQUIRES_ERROR}.")
    return args.removeprefix("v")


def _add_parameter(plan: CreatePlan, name: str, value: str) -> None:
    """One PARAMETER, merged as Ollama merges them: lists (``stop``) grow, other values are replaced.

    Deprecated names are dropped with a warning, as ``ollama create`` does.
    """
    try:
        typed, warnings = format_params({name: [value]})
    except ModelfileError as exc:
        raise CreatePlanError(f"PARAMETER {name} {value}: {exc}") from exc
    plan.warnings.extend(w for w in warnings if w not in plan.warnings)
    for key, typed_value in typed.items():
        if isinstance(typed_value, float) and not math.isfinite(typed_value):
            raise CreatePlanError(f"PARAMETER {name} {value}: infinity and NaN cannot be sent to Ollama.")
        current = plan.parameters.get(key)
        if isinstance(current, list) and isinstance(typed_value, list):
            plan.parameters[key] = current + typed_value
        else:
            plan.parameters[key] = typed_value


def _blob_files(found: dict[str, tuple[Path, str, int]]) -> list[BlobFile]:
    names = request_file_names(list(found))
    return [BlobFile(names[key], path, digest, size) for key, (path, digest, size) in found.items()]


def _common_root(paths: list[str]) -> str | None:
    if len(paths) < 2:
        return None
    try:
        return os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths])
    except ValueError:  # different drives
        return None


def _content_type(path: str) -> str:
    """A small ``http.DetectContentType``: zip, plain text, or binary (what filesForModel tells apart)."""
    with open(path, "rb") as handle:
        head = handle.read(512)
    if head.startswith(b"PK\x03\x04"):
        return "application/zip"
    if head.startswith((b"\xfe\xff", b"\xff\xfe", b"\xef\xbb\xbf")) or not any(b in _BINARY for b in head):
        return "text/plain"
    return "application/octet-stream"
