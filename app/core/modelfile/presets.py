"""Modelfiles as presets for every engine: one explicit table from Ollama's options to each engine.

A parameter an engine cannot honour is reported with the reason, never dropped silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from app.core.chat.formats import TEXT_CONTINUATION_FORMAT
from app.core.modelfile.params import format_params
from app.core.modelfile.parser import Modelfile, ModelfileError
from app.core.params import LoadParams, SamplingParams


@dataclass(frozen=True)
class Route:
    """Where one Ollama option goes: ``None`` means the engine cannot honour it, and ``reason`` says why."""

    llamacpp: str | None
    vllm: str | None
    llamacpp_reason: str = ""
    vllm_reason: str = ""


# Targets: "load.<LoadParams field>", "sampling.<SamplingParams field>" for llama.cpp;
# "request.<OpenAI/vLLM request field>", "launch.<vllm serve flag>" for vLLM.
ROUTES: dict[str, Route] = {
    "num_ctx": Route("load.n_ctx", "launch.--max-model-len"),
    "num_batch": Route(
        "load.n_batch", None, vllm_reason="vLLM schedules by --max-num-batched-tokens, not a batch size"
    ),
    "num_gpu": Route("load.n_gpu_layers", None, vllm_reason="vLLM keeps every layer on the GPU (see --cpu-offload-gb)"),
    "main_gpu": Route("load.main_gpu", None, vllm_reason="vLLM picks GPUs from CUDA_VISIBLE_DEVICES"),
    "use_mmap": Route("load.use_mmap", None, vllm_reason="vLLM loads weights its own way"),
    "num_thread": Route("load.n_threads", None, vllm_reason="vLLM's CPU threads are set by VLLM_CPU_OMP_THREADS_BIND"),
    "repeat_last_n": Route("load.repeat_last_n", None, vllm_reason="vLLM's repetition penalty covers the whole text"),
    "num_keep": Route(None, None, "llama-cpp-python has no num_keep", "vLLM has no num_keep"),
    "draft_num_predict": Route(None, None, "no draft model in the llama.cpp backend", "set a speculative config"),
    "seed": Route("sampling.seed", "request.seed"),
    "num_predict": Route("sampling.max_tokens", "request.max_tokens"),
    "temperature": Route("sampling.temperature", "request.temperature"),
    "top_k": Route("sampling.top_k", "request.top_k"),
    "top_p": Route("sampling.top_p", "request.top_p"),
    "min_p": Route("sampling.min_p", "request.min_p"),
    "typical_p": Route("sampling.typical_p", None, vllm_reason="vLLM has no typical sampling"),
    "repeat_penalty": Route("sampling.repeat_penalty", "request.repetition_penalty"),
    "presence_penalty": Route("sampling.presence_penalty", "request.presence_penalty"),
    "frequency_penalty": Route("sampling.frequency_penalty", "request.frequency_penalty"),
    "stop": Route("sampling.stop", "request.stop"),
}


# Instructions other than FROM/SYSTEM/MESSAGE/PARAMETER, per engine: None = honoured, else why not.
INSTRUCTION_NOTES: dict[str, tuple[str | None, str | None]] = {
    "template": (
        "llama.cpp formats chats with the GGUF's own (Jinja) chat template or the chosen chat format",
        "vLLM formats chats with the model's Jinja chat template (--chat-template), not Go templates",
    ),
    "adapter": (None, "serve LoRA adapters with --enable-lora and --lora-modules"),
    "draft": ("no draft model in the llama.cpp backend", "configure speculative decoding with --speculative-config"),
    "renderer": ("an Ollama-only setting", "an Ollama-only setting"),
    "parser": ("an Ollama-only setting", "an Ollama-only setting"),
}


@dataclass
class Ignored:
    name: str
    reason: str


@dataclass
class LlamaCppPreset:
    """What a Modelfile sets for the llama.cpp backend."""

    load: LoadParams
    sampling: SamplingParams
    system: str | None
    messages: list[tuple[str, str]]
    model: str | None
    ignored: list[Ignored] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def notes(self, name: str, reload_needed: bool) -> list[str]:
        """What applying this preset did and did not do, for the person who applied it."""
        notes = [f"Preset {name} applied to a new chat."]
        if reload_needed:
            notes.append("Its load options differ from the loaded model's: load the model again to apply them.")
        if self.model and not self.model.endswith(".gguf"):
            notes.append(f"FROM {self.model} names an Ollama model; the loaded model is kept.")
        if self.ignored:
            skipped = "; ".join(f"{item.name} ({item.reason})" for item in self.ignored)
            notes.append(f"Not applied by llama.cpp: {skipped}.")
        return notes + self.warnings

    def load_changed(self, current: LoadParams) -> list[str]:
        """Load options that differ from ``current``: applying them needs a reload."""
        return [name for name in LoadParams.__dataclass_fields__ if getattr(self.load, name) != getattr(current, name)]


# vLLM request field -> the SamplingParams field the app sends it from.
_REQUEST_SAMPLING = {
    "temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "seed": "seed",
    "max_tokens": "max_tokens", "repetition_penalty": "repeat_penalty", "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty", "stop": "stop",
}  # fmt: skip


@dataclass
class VllmPreset:
    request: dict[str, Any]
    launch_flags: list[str]
    system: str | None
    messages: list[tuple[str, str]]
    ignored: list[Ignored] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def sampling_over(self, sampling: SamplingParams) -> SamplingParams:
        """The chat's sampling with this preset's request fields applied."""
        changes = {_REQUEST_SAMPLING[k]: v for k, v in self.request.items() if k in _REQUEST_SAMPLING}
        if "stop" in changes:
            changes["stop"] = tuple(changes["stop"])
        return replace(sampling, **changes)

    def notes(self, name: str) -> list[str]:
        """What applying this preset to a vLLM chat did and did not do."""
        notes = [f"Preset {name} applied to a new chat."]
        if self.launch_flags:
            notes.append("Start the vLLM server with " + " ".join(self.launch_flags) + " for the rest of it.")
        if self.ignored:
            skipped = "; ".join(f"{item.name} ({item.reason})" for item in self.ignored)
            notes.append(f"Not applied by vLLM: {skipped}.")
        return notes + self.warnings


_RAW_TEMPLATE = re.compile(r"\{\{-?\s*\.Prompt\s*-?\}\}")


def raw_template(modelfile: Modelfile) -> bool:
    """Whether TEMPLATE is Ollama's raw ``{{ .Prompt }}``: the text as written, no turn markers. llama.cpp honours
    it with the app's text-continuation chat format (a base model continues the conversation as one text)."""
    return modelfile.template is not None and _RAW_TEMPLATE.fullmatch(modelfile.template.strip()) is not None


def _instructions_ignored(modelfile: Modelfile, engine: int) -> list[Ignored]:
    """Non-parameter instructions the engine (0 llama.cpp, 1 vLLM) does not apply."""
    present = {command.name for command in modelfile.commands}
    ignored = []
    for name, notes in INSTRUCTION_NOTES.items():
        reason = notes[engine]
        if name in present and reason is not None:
            ignored.append(Ignored(name.upper(), reason))
    return ignored


def typed_parameters(modelfile: Modelfile) -> tuple[dict[str, Any], list[Ignored], list[str]]:
    """Type each PARAMETER on its own, so one bad value is reported without losing the others."""
    typed: dict[str, Any] = {}
    ignored: list[Ignored] = []
    warnings: list[str] = []
    for name, values in modelfile.parameters().items():
        try:
            values_typed, found = format_params({name: values})
        except ModelfileError as exc:
            ignored.append(Ignored(name, str(exc)))
            continue
        typed.update(values_typed)
        warnings.extend(found)
    return typed, ignored, warnings


def _engine_value(name: str, value: Any) -> Any:
    """Ollama's special values in each engine's terms."""
    if name == "seed" and value < 0:
        return None  # -1: random
    if name == "num_predict" and value < 0:
        return None  # -1 infinite, -2 fill the context
    if name == "num_gpu" and value < 0:
        return None  # -1: Ollama decides; ours: all layers when the build can offload
    if name == "num_thread" and value == 0:
        return None  # 0: the runtime decides
    if name == "stop":
        return tuple(value)
    return value


def to_llamacpp(modelfile: Modelfile, load: LoadParams, sampling: SamplingParams) -> LlamaCppPreset:
    """Apply a Modelfile over the current load and sampling settings for llama.cpp."""
    typed, ignored, warnings = typed_parameters(modelfile)
    load_changes: dict[str, Any] = {}
    sampling_changes: dict[str, Any] = {}
    for name, value in typed.items():
        route = ROUTES.get(name)
        if route is None or route.llamacpp is None:
            ignored.append(Ignored(name, route.llamacpp_reason if route else "not an option this app maps"))
            continue
        group, target = route.llamacpp.split(".", 1)
        (load_changes if group == "load" else sampling_changes)[target] = _engine_value(name, value)
    adapters = modelfile.adapters()
    if adapters:
        load_changes["lora_path"] = adapters[-1]  # as in Ollama, only the last ADAPTER counts
    ignored += _instructions_ignored(modelfile, 0)
    if raw_template(modelfile):
        load_changes["chat_format"] = TEXT_CONTINUATION_FORMAT
        ignored = [item for item in ignored if item.name != "TEMPLATE"]
    froms = modelfile.froms()
    return LlamaCppPreset(
        load=replace(load, **load_changes),
        sampling=replace(sampling, **sampling_changes),
        system=modelfile.system,
        messages=modelfile.messages(),
        model=froms[0] if froms else None,
        ignored=ignored,
        warnings=warnings,
    )


def to_vllm(modelfile: Modelfile) -> VllmPreset:
    """The request fields and ``vllm serve`` flags a Modelfile sets for vLLM."""
    typed, ignored, warnings = typed_parameters(modelfile)
    request: dict[str, Any] = {}
    flags: list[str] = []
    for name, value in typed.items():
        route = ROUTES.get(name)
        if route is None or route.vllm is None:
            ignored.append(Ignored(name, route.vllm_reason if route else "not an option this app maps"))
            continue
        group, target = route.vllm.split(".", 1)
        engine_value = _engine_value(name, value)
        if group == "launch":
            flags += [target, str(engine_value)]
        elif engine_value is not None:
            request[target] = list(engine_value) if name == "stop" else engine_value
    ignored += _instructions_ignored(modelfile, 1)
    return VllmPreset(request, flags, modelfile.system, modelfile.messages(), ignored, warnings)


# SamplingParams field -> the Ollama option it corresponds to (for carrying a chat between engines).
_SAMPLING_OPTION = {
    "temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
    "repeat_penalty": "repeat_penalty", "max_tokens": "num_predict", "seed": "seed", "stop": "stop",
    "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty", "typical_p": "typical_p",
}  # fmt: skip
_ENGINE_NAMES = {"llamacpp": "llama.cpp", "vllm": "vLLM", "ollama": "Ollama"}
_MODEL_FORMATS = {
    "llamacpp": "a GGUF file run by llama.cpp",
    "vllm": "a Hugging Face-format model served by vLLM",
    "ollama": "a model from Ollama's store",
}
_LLAMACPP_ONLY_LOAD = ("n_gpu_layers", "flash_attn", "type_k", "type_v", "use_mmap", "use_mlock", "lora_path")


def engine_switch_notes(source: str, target: str, sampling: SamplingParams, load: LoadParams) -> list[str]:
    """What changes when a conversation moves from one engine to another: format, and what does not carry."""
    name = _ENGINE_NAMES.get(target, target)
    notes = [
        f"This chat continues on {name}: its history is kept and sent to the new model, "
        f"now {_MODEL_FORMATS.get(target, 'another model')} instead of {_MODEL_FORMATS.get(source, 'the old one')}."
    ]
    defaults = SamplingParams()
    dropped = []
    for field_name, option in _SAMPLING_OPTION.items():
        route = ROUTES[option]
        unsupported = (
            route.vllm is None if target == "vllm" else route.llamacpp is None if target == "llamacpp" else False
        )
        if unsupported and getattr(sampling, field_name) != getattr(defaults, field_name):
            dropped.append(f"{field_name} ({route.vllm_reason if target == 'vllm' else route.llamacpp_reason})")
    if dropped:
        notes.append(f"Not carried over to {name}: " + "; ".join(dropped) + ".")
    if source == "llamacpp" and target != "llamacpp":
        changed = [f for f in _LLAMACPP_ONLY_LOAD if getattr(load, f) != getattr(LoadParams(), f)]
        if changed:
            notes.append("llama.cpp load options that do not apply there: " + ", ".join(changed) + ".")
    return notes
