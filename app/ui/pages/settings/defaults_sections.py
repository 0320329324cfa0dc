"""The Loading and Sampling sections: the defaults a model is loaded and a reply sampled with."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QWidget

from app.core.params import KV_CACHE_TYPES, LoadParams, SamplingParams
from app.core.settings import Settings
from app.ui.pages.settings.fields import (
    FIELD_WIDTH,
    INT_MAX,
    ExactFloat,
    SectionBody,
    check,
    combo,
    connect_edits,
    hint,
    optional,
    set_combo,
    spin,
)
from app.ui.pages.settings.section import Section
from app.ui.widgets.sampling_spin import SamplingSpinBox
from app.ui.widgets.sampling_spin import sampling_spin as _sampling_spin

FROM_MODEL = "(from the model)"
# llama-cpp-python chat_format names offered in the override combo (free text is accepted too).
CHAT_FORMATS = (
    "gemma",
    "chatml",
    "llama-2",
    "llama-3",
    "mistral-instruct",
    "qwen",
    "zephyr",
    "phind",
    "vicuna",
    "alpaca",
    "openchat",
    "chatglm3",
    "baichuan-2",
)
MMAP_TIP = (
    "Map the model file into memory instead of reading it all at load: faster start, and pages are only read when used."
)
MLOCK_TIP = (
    "Lock the model weights and KV cache in RAM so the system never moves them out to swap. "
    "Needs enough free memory, and on Linux possibly a higher memlock limit (ulimit -l)."
)


def sampling_spin(minimum: float, maximum: float, step: float, tip: str) -> SamplingSpinBox:
    box = _sampling_spin(minimum, maximum, step, tip)
    box.setMinimumWidth(FIELD_WIDTH)
    return box


class LoadingSection(Section):
    name = "Loading"
    icon = "cpu"

    def build(self) -> SectionBody:
        body = SectionBody("Loading", "How llama.cpp loads a model unless the model's own settings say otherwise.")
        memory = body.group("Memory")
        self.n_ctx = spin(1, INT_MAX, tip="Context window in tokens; the KV cache grows with it.")
        memory.addRow("Context size", self.n_ctx)
        memory.addRow("", hint("Tokens the model can see at once. Each token of context takes KV cache memory."))
        memory.addRow("GPU layers", self._gpu_layers_row())
        self.type_k = combo(KV_CACHE_TYPES, tip="Precision of the KV cache keys; q8_0 and q4_0 save memory.")
        memory.addRow("K cache type", self.type_k)
        self.type_v = combo(
            KV_CACHE_TYPES, tip="Precision of the KV cache values; quantized types need flash attention."
        )
        memory.addRow("V cache type", self.type_v)
        self.flash_attn = check(
            "Flash attention", "Faster attention with less memory; required for a quantized V cache."
        )
        memory.addRow("", self.flash_attn)
        self.use_mmap = check("Memory-map the model file (use_mmap)", MMAP_TIP)
        memory.addRow("", self.use_mmap)
        self.use_mlock = check("Keep the model in RAM (use_mlock)", MLOCK_TIP)
        memory.addRow("", self.use_mlock)
        memory.addRow("", hint(MLOCK_TIP))
        speed = body.group("Speed and format")
        self.n_threads = spin(0, 1024, "Automatic", "CPU threads for generation.")
        speed.addRow("Threads", self.n_threads)
        self.n_batch = spin(1, INT_MAX, tip="Tokens processed per step while reading the prompt.")
        speed.addRow("Batch size", self.n_batch)
        self.chat_format = combo((FROM_MODEL, *CHAT_FORMATS), editable=True)
        self.chat_format.setToolTip("Override the chat format; by default the template stored in the model is used.")
        speed.addRow("Chat format", self.chat_format)
        speed.addRow("", hint("Leave it on “(from the model)” unless replies come out garbled."))
        connect_edits(self.edited, self.n_ctx, self.n_gpu_layers, self.n_threads, self.n_batch, self.all_gpu_layers)
        connect_edits(self.edited, self.flash_attn, self.use_mmap, self.use_mlock)
        connect_edits(self.edited, self.type_k, self.type_v, self.chat_format)
        return body

    def _gpu_layers_row(self) -> QWidget:
        self.n_gpu_layers = spin(0, 100_000, tip="Layers to offload to the GPU; 0 runs on the CPU only.")
        self.all_gpu_layers = QCheckBox("All layers when the build supports GPU offload")
        self.all_gpu_layers.toggled.connect(lambda on: self.n_gpu_layers.setEnabled(not on))
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.n_gpu_layers)
        layout.addWidget(self.all_gpu_layers, 1)
        return row

    def show(self, settings: Settings) -> None:
        load = settings.load
        self.n_ctx.setValue(load.n_ctx)
        self.n_gpu_layers.setValue(load.n_gpu_layers or 0)
        self.all_gpu_layers.setChecked(load.n_gpu_layers is None)
        self.n_gpu_layers.setEnabled(load.n_gpu_layers is not None)
        self.n_threads.setValue(load.n_threads or 0)
        self.n_batch.setValue(load.n_batch)
        self.flash_attn.setChecked(load.flash_attn)
        set_combo(self.type_k, load.type_k)
        set_combo(self.type_v, load.type_v)
        self.use_mmap.setChecked(load.use_mmap)
        self.use_mlock.setChecked(load.use_mlock)
        set_combo(self.chat_format, load.chat_format or FROM_MODEL)

    def load_params(self, shown: Settings) -> LoadParams:
        chat_format = self.chat_format.currentText().strip()
        return replace(  # fields without a widget here (main_gpu, repeat_last_n, lora_path) are carried over
            shown.load,
            n_ctx=self.n_ctx.value(),
            n_gpu_layers=None if self.all_gpu_layers.isChecked() else self.n_gpu_layers.value(),
            n_threads=optional(self.n_threads),
            n_batch=self.n_batch.value(),
            flash_attn=self.flash_attn.isChecked(),
            type_k=self.type_k.currentText(),
            type_v=self.type_v.currentText(),
            use_mmap=self.use_mmap.isChecked(),
            use_mlock=self.use_mlock.isChecked(),
            chat_format=None if chat_format in ("", FROM_MODEL) else chat_format,
        )

    def values(self, shown: Settings) -> dict[str, Any]:
        return {"load": self.load_params(shown)}

    def problems(self, shown: Settings) -> list[str]:
        return self.load_params(shown).problems()


class SamplingSection(Section):
    name = "Sampling"
    icon = "spark"

    def build(self) -> SectionBody:
        body = SectionBody(
            "Sampling", "How replies are sampled unless a preset or the chat's own settings say otherwise."
        )
        form = body.group("Randomness")
        self.temperature = ExactFloat(sampling_spin(0.0, 5.0, 0.05, "Higher is more random."))
        form.addRow("Temperature", self.temperature.box)
        form.addRow("", hint("0 always picks the likeliest token; around 0.7 reads naturally."))
        self.top_p = ExactFloat(sampling_spin(0.0, 1.0, 0.01, "Nucleus sampling; 1 turns it off."))
        form.addRow("Top P", self.top_p.box)
        self.top_k = spin(0, 100_000, tip="Sample among the K likeliest tokens; 0 turns it off.")
        form.addRow("Top K", self.top_k)
        min_p_tip = "Drop tokens less likely than this share of the likeliest one."
        self.min_p = ExactFloat(sampling_spin(0.0, 1.0, 0.01, min_p_tip))
        form.addRow("Min P", self.min_p.box)
        self.repeat_penalty = ExactFloat(sampling_spin(0.0, 5.0, 0.05, "1 turns it off."))
        form.addRow("Repeat penalty", self.repeat_penalty.box)
        form.addRow("", hint("Above 1 discourages repeating recent tokens; 1 turns it off."))
        length = body.group("Length and repeatability")
        self.max_tokens = spin(0, INT_MAX, "until context is full", "Longest reply in tokens.")
        length.addRow("Max tokens", self.max_tokens)
        self.seed = spin(-1, INT_MAX, "random", "A fixed seed repeats the same reply for the same input.")
        length.addRow("Seed", self.seed)
        length.addRow("", hint("A fixed seed repeats the same reply for the same input and settings."))
        floats = (self.temperature, self.top_p, self.min_p, self.repeat_penalty)
        connect_edits(self.edited, *(f.box for f in floats), self.top_k, self.max_tokens, self.seed)
        return body

    def show(self, settings: Settings) -> None:
        sampling = settings.sampling
        self.temperature.set(sampling.temperature)
        self.top_p.set(sampling.top_p)
        self.top_k.setValue(sampling.top_k)
        self.min_p.set(sampling.min_p)
        self.repeat_penalty.set(sampling.repeat_penalty)
        self.max_tokens.setValue(sampling.max_tokens or 0)
        self.seed.setValue(-1 if sampling.seed is None else sampling.seed)

    def sampling_params(self, shown: Settings) -> SamplingParams:
        return replace(  # stop sequences and penalties without a widget here are carried over
            shown.sampling,
            temperature=self.temperature.value(),
            top_p=self.top_p.value(),
            top_k=self.top_k.value(),
            min_p=self.min_p.value(),
            repeat_penalty=self.repeat_penalty.value(),
            max_tokens=optional(self.max_tokens),
            seed=optional(self.seed),
        )

    def values(self, shown: Settings) -> dict[str, Any]:
        return {"sampling": self.sampling_params(shown)}
