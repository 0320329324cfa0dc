"""The one table from Ollama options to each engine: every row applied, every gap reported."""

from __future__ import annotations

import pytest

from app.core.modelfile.params import OLLAMA_OPTIONS
from app.core.modelfile.parser import parse_modelfile
from app.core.modelfile.presets import ROUTES, to_llamacpp, to_vllm
from app.core.params import LoadParams, SamplingParams

FULL = """FROM ./model.gguf
SYSTEM Be exact.
MESSAGE user Hi
MESSAGE assistant Hello!
PARAMETER num_ctx 32768
PARAMETER num_batch 256
PARAMETER num_gpu 20
PARAMETER main_gpu 1
PARAMETER use_mmap false
PARAMETER num_thread 6
PARAMETER repeat_last_n 128
PARAMETER num_keep 8
PARAMETER seed 7
PARAMETER num_predict 300
PARAMETER temperature 0.2
PARAMETER top_k 30
PARAMETER top_p 0.9
PARAMETER min_p 0.1
PARAMETER typical_p 0.8
PARAMETER repeat_penalty 1.2
PARAMETER presence_penalty 0.3
PARAMETER frequency_penalty 0.4
PARAMETER stop <|im_end|>
PARAMETER stop "User:"
TEMPLATE "[INST] {{ .Prompt }} [/INST]"
ADAPTER ./lora.gguf
"""


def test_every_ollama_option_has_a_route():
    assert set(ROUTES) == set(OLLAMA_OPTIONS)


def test_llamacpp_mapping_applies_every_supported_option():
    preset = to_llamacpp(parse_modelfile(FULL), LoadParams(), SamplingParams())
    assert preset.load == LoadParams(
        n_ctx=32768, n_batch=256, n_gpu_layers=20, main_gpu=1, use_mmap=False, n_threads=6, repeat_last_n=128,
        lora_path="./lora.gguf",
    )  # fmt: skip
    assert preset.sampling == SamplingParams(
        seed=7, max_tokens=300, temperature=0.2, top_k=30, top_p=0.9, min_p=0.1, typical_p=0.8,
        repeat_penalty=1.2, presence_penalty=0.3, frequency_penalty=0.4, stop=("<|im_end|>", "User:"),
    )  # fmt: skip
    assert preset.system == "Be exact." and preset.messages == [("user", "Hi"), ("assistant", "Hello!")]
    assert preset.model == "./model.gguf"
    assert {i.name for i in preset.ignored} == {"num_keep", "TEMPLATE"}
    assert all(i.reason for i in preset.ignored)


@pytest.mark.parametrize("template", ["{{ .Prompt }}", "{{- .Prompt -}}", '"{{ .Prompt }}"'])
def test_a_raw_template_is_text_continuation_for_llamacpp(template):
    preset = to_llamacpp(parse_modelfile(f"FROM x\nTEMPLATE {template}\n"), LoadParams(), SamplingParams())
    assert preset.load.chat_format == "text-continuation" and preset.ignored == []
    vllm = to_vllm(parse_modelfile(f"FROM x\nTEMPLATE {template}\n"))
    assert [i.name for i in vllm.ignored] == ["TEMPLATE"]


def test_vllm_mapping_requests_flags_and_gaps():
    preset = to_vllm(parse_modelfile(FULL))
    assert preset.launch_flags == ["--max-model-len", "32768"]
    assert preset.request == {
        "seed": 7, "max_tokens": 300, "temperature": 0.2, "top_k": 30, "top_p": 0.9, "min_p": 0.1,
        "repetition_penalty": 1.2, "presence_penalty": 0.3, "frequency_penalty": 0.4, "stop": ["<|im_end|>", "User:"],
    }  # fmt: skip
    ignored = {i.name for i in preset.ignored}
    assert ignored == {
        "num_batch", "num_gpu", "main_gpu", "use_mmap", "num_thread", "repeat_last_n", "num_keep", "typical_p",
        "TEMPLATE", "ADAPTER",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("line", "field", "value"),
    [
        ("PARAMETER seed -1", "seed", None),
        ("PARAMETER num_predict -1", "max_tokens", None),
        ("PARAMETER num_predict -2", "max_tokens", None),
    ],
)
def test_ollama_special_values_mean_the_engine_default(line, field, value):
    preset = to_llamacpp(parse_modelfile(f"FROM x\n{line}\n"), LoadParams(), SamplingParams(seed=3, max_tokens=9))
    assert getattr(preset.sampling, field) == value


def test_num_gpu_minus_one_and_num_thread_zero():
    preset = to_llamacpp(
        parse_modelfile("FROM x\nPARAMETER num_gpu -1\nPARAMETER num_thread 0\n"),
        LoadParams(n_gpu_layers=5, n_threads=3),
        SamplingParams(),
    )
    assert preset.load.n_gpu_layers is None and preset.load.n_threads is None


def test_bad_and_unknown_parameters_are_reported_not_applied():
    modelfile = parse_modelfile("FROM x\nPARAMETER temperature hot\nPARAMETER Temperature 1\nPARAMETER top_k 5\n")
    preset = to_llamacpp(modelfile, LoadParams(), SamplingParams(temperature=0.5))
    assert preset.sampling.temperature == 0.5 and preset.sampling.top_k == 5
    reasons = {i.name: i.reason for i in preset.ignored}
    assert reasons["temperature"] == "invalid float value [hot]"
    assert reasons["Temperature"] == "unknown parameter 'Temperature'"


def test_deprecated_parameter_warns(tmp_path):
    preset = to_llamacpp(parse_modelfile("FROM x\nPARAMETER use_mlock true\n"), LoadParams(), SamplingParams())
    assert preset.warnings == ["warning: parameter use_mlock is deprecated"]


def test_load_changed_names_the_fields():
    preset = to_llamacpp(parse_modelfile("FROM x\nPARAMETER num_ctx 8192\n"), LoadParams(), SamplingParams())
    assert preset.load_changed(LoadParams()) == ["n_ctx"]
    assert "load the model again" in " ".join(preset.notes("coding", True))


def test_engine_switch_notes_say_what_changes():
    from app.core.modelfile.presets import engine_switch_notes

    notes = engine_switch_notes(
        "llamacpp", "vllm", SamplingParams(typical_p=0.8, temperature=0.3), LoadParams(flash_attn=True, type_k="q8_0")
    )
    text = " ".join(notes)
    assert "continues on vLLM" in text and "GGUF" in text and "Hugging Face-format" in text
    assert "typical_p (vLLM has no typical sampling)" in text and "temperature" not in text.split("Not carried")[1]
    assert "flash_attn, type_k" in text
    assert engine_switch_notes("vllm", "llamacpp", SamplingParams(), LoadParams())[1:] == []
