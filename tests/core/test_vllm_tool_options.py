"""The managed vLLM server's tool calling: the parser picked from the model's name, the user's choice or the extra
arguments winning over it, and tool calling off for models the app does not know."""

from __future__ import annotations

import pytest

from app.core.vllm.options import VllmServerOptions, serve_argv, tool_parser_for, unsupported_flags, validate


@pytest.mark.parametrize(
    ("model", "parser"),
    [
        ("Qwen/Qwen2.5-7B-Instruct", "hermes"),
        ("/models/Qwen3-0.6B", "hermes"),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_coder"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3_json"),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4_pythonic"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral"),
        ("NousResearch/Hermes-2-Pro-Mistral-7B", "hermes"),
        ("openai/gpt-oss-20b", "openai"),
        ("/data/tiny_llama", None),
        ("facebook/opt-125m", None),
    ],
)
def test_the_parser_is_picked_from_the_models_name(model, parser):
    assert tool_parser_for(model) == parser


def tool_flags(options: VllmServerOptions) -> list[str]:
    argv = serve_argv("python", options)
    return argv[argv.index("--enable-auto-tool-choice") :] if "--enable-auto-tool-choice" in argv else []


def test_the_users_choice_and_extra_arguments_win_and_an_unknown_model_gets_no_tool_flags():
    assert tool_flags(VllmServerOptions("meta-llama/Llama-3.2-3B-Instruct")) == [
        "--enable-auto-tool-choice", "--tool-call-parser", "llama3_json"]  # fmt: skip
    assert tool_flags(VllmServerOptions("Qwen/Qwen3-8B", tool_call_parser="qwen3_xml"))[-1] == "qwen3_xml"
    assert tool_flags(VllmServerOptions("Qwen/Qwen3-8B", tool_call_parser="")) == []
    own = VllmServerOptions("Qwen/Qwen3-8B", extra_args=["--enable-auto-tool-choice", "--tool-call-parser", "x"])
    assert serve_argv("python", own).count("--tool-call-parser") == 1 and validate(own) == []
    assert tool_flags(VllmServerOptions("facebook/opt-125m")) == []


def test_a_bad_parser_name_is_refused_and_old_versions_are_told():
    assert any("not a parser name" in m for m in validate(VllmServerOptions("m", tool_call_parser="a b")))
    old = unsupported_flags(VllmServerOptions("Qwen/Qwen3-8B"), "0.5.5")
    assert "--enable-auto-tool-choice needs vLLM ≥ 0.6.0; installed is 0.5.5. Update vLLM or clear that setting." in old
