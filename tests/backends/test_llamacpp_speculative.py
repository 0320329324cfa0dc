"""Speculative decoding on llama.cpp with real llama-cpp-python on tiny GGUFs: n-gram lookup and a draft model give
the text they give without speculation at temperature 0, with grammars, stops and logprobs; drafted and accepted
tokens are counted; a draft that cannot draft is refused, naming the failed check."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import gguf
import pytest

from app.backends.llamacpp.backend import LlamaCppBackend, LoadRefusedError
from app.backends.llamacpp.engine import EngineError, LlamaEngine
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from tests.support.gguf_factory import write_tiny_gguf

# a prompt that repeats itself: n-gram lookup finds drafts in it
REPEATING = "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the cat"
GREEDY = SamplingParams(temperature=0.0, max_tokens=48, seed=1)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A model that never ends by itself, a draft with its very weights (it guesses right), and one with others."""
    folder = tmp_path_factory.mktemp("spec")
    model = write_tiny_gguf(folder / "model.gguf", context_length=4096, never_eos=True, name="model")
    twin = write_tiny_gguf(folder / "twin-draft.gguf", context_length=4096, never_eos=True, name="twin")
    other = write_tiny_gguf(folder / "other-draft.gguf", context_length=4096, never_eos=True, seed=5, name="other")
    return model, twin, other


PLAIN_OPTIONS = GenerationOptions()


def _complete(engine: LlamaEngine, options: GenerationOptions = PLAIN_OPTIONS, sampling=GREEDY):
    pieces: list[str] = []
    entries: list[dict] = []

    def emit(text, logprobs):
        pieces.append(text)
        entries.extend(logprobs or [])

    counts = engine.stream_completion(REPEATING, sampling, options, emit)
    return "".join(pieces), counts, entries


def _engine(model: Path, speculative: str, flash_attn: bool = True) -> LlamaEngine:
    """The model loaded; with flash attention by default, as speculation loads it: "off" at the same numerics (with
    it and without it, near ties among the top logprobs can come out in another order)."""
    engine = LlamaEngine()
    engine.load(str(model), LoadParams(n_ctx=512, speculative=speculative, flash_attn=flash_attn))
    return engine


def _reply(model: Path, speculative: str, **kwargs):
    engine = _engine(model, speculative)
    try:
        return _complete(engine, **kwargs)
    finally:
        engine.unload()


@pytest.mark.parametrize("mode", ["ngram", "draft"])
def test_speculative_text_is_the_text_without_it_and_drafts_are_counted(models, mode):
    model, twin, other = models
    plain, plain_counts, _ = _reply(model, "off")
    for draft in [twin, other] if mode == "draft" else [None]:
        setting = f"draft:{draft}" if draft else "ngram"
        text, counts, _ = _reply(model, setting)
        assert text == plain
        assert counts["completion_tokens"] == plain_counts["completion_tokens"] == GREEDY.max_tokens
        assert counts["spec_mode"] == mode
        assert 0 <= counts["spec_accepted"] <= counts["spec_drafted"] and counts["spec_drafted"] > 0
    assert plain_counts["spec_mode"] is None and plain_counts["spec_drafted"] == 0


def test_a_draft_with_the_models_own_weights_is_accepted_and_other_weights_are_not(models):
    model, twin, other = models
    plain = SamplingParams(temperature=0.0, repeat_penalty=1.0, max_tokens=48, seed=1)  # the drafts are plain argmax
    _, twin_counts, _ = _reply(model, f"draft:{twin}", sampling=plain)
    _, other_counts, _ = _reply(model, f"draft:{other}", sampling=plain)
    # every draft the twin makes is the model's own choice; those past the reply's last token are not counted
    assert twin_counts["spec_accepted"] >= 48 - 10
    assert twin_counts["spec_accepted"] / twin_counts["spec_drafted"] > 0.8
    assert other_counts["spec_accepted"] / other_counts["spec_drafted"] < 0.5


def test_logprobs_stops_and_grammars_are_the_same_with_speculation(models):
    model, twin, _ = models
    logprobs = GenerationOptions(logprobs=True, top_logprobs=2)
    stopped = SamplingParams(temperature=0.0, max_tokens=48, seed=1, stop=("at",))
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    grammar = GenerationOptions(response_format={"type": "json_schema", "json_schema": {"schema": schema}})
    for setting in ("ngram", f"draft:{twin}"):
        cases: list[dict[str, Any]] = [{"options": logprobs}, {"sampling": stopped}, {"options": grammar}]
        for case in cases:
            plain, plain_counts, plain_entries = _reply(model, "off", **case)
            text, counts, entries = _reply(model, setting, **case)
            assert (text, counts["finish_reason"]) == (plain, plain_counts["finish_reason"]), case
            assert [e["token"] for e in entries] == [e["token"] for e in plain_entries]
            for ours, theirs in zip(entries, plain_entries, strict=True):
                assert ours["logprob"] == pytest.approx(theirs["logprob"], abs=1e-3)
                assert [t["token"] for t in ours["top_logprobs"]] == [t["token"] for t in theirs["top_logprobs"]]
        grammar_text, _, _ = _reply(model, setting, options=grammar)
        assert isinstance(json.loads(grammar_text)["n"], int)


def test_a_reply_asked_to_go_without_speculation_does_so_once(models):
    model, _, _ = models
    engine = _engine(model, "ngram")
    try:
        engine.speculate_next = False
        plain_text, plain_counts, _ = _complete(engine)
        text, counts, _ = _complete(engine)
    finally:
        engine.unload()
    assert plain_counts["spec_mode"] is None and plain_counts["spec_drafted"] == 0
    assert counts["spec_mode"] == "ngram" and counts["spec_drafted"] > 0
    assert text == plain_text


def _vocab_gguf(path: Path, size: int) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(size)])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_draft_that_cannot_draft_is_refused_naming_the_failed_check(models, tmp_path):
    model, _, _ = models
    engine = LlamaEngine()
    foreign = _vocab_gguf(tmp_path / "foreign.gguf", 200)
    cases = {
        f"draft:{foreign}": "vocabulary size differs",
        f"draft:{model}": "it is the model itself",
        f"draft:{tmp_path / 'missing.gguf'}": "does not exist",
        "sometimes": 'is "off", "ngram" or "draft:',
    }
    for setting, words in cases.items():
        with pytest.raises(EngineError) as caught:
            engine.load(str(model), LoadParams(n_ctx=512, speculative=setting))
        assert words in str(caught.value)
    assert engine.llm is None


def test_the_worker_fills_the_reply_figures_and_can_skip_speculation_once(models, tmp_path):
    model, twin, _ = models
    foreign = _vocab_gguf(tmp_path / "foreign.gguf", 200)

    async def scenario():
        backend = LlamaCppBackend()
        try:
            await backend.load(str(model), LoadParams(n_ctx=512, speculative=f"draft:{twin}"))
            assert backend.speculative_mode == "draft"
            first = backend.stream_completion(REPEATING, GREEDY)
            first_text = "".join([d.text async for d in first])
            backend.skip_speculation_once()
            second = backend.stream_completion(REPEATING, GREEDY)
            second_text = "".join([d.text async for d in second])
            with pytest.raises(LoadRefusedError) as refused:
                await backend.load(str(model), LoadParams(n_ctx=512, speculative=f"draft:{foreign}"))
            return first_text, first.stats, second_text, second.stats, str(refused.value), backend.speculative_mode
        finally:
            await backend.close()

    first_text, first, second_text, second, refusal, mode_after = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert first is not None and second is not None
    assert first.spec_mode == "draft" and first.spec_accepted > 0 and first.spec_drafted >= first.spec_accepted
    assert second.spec_mode is None and second.spec_drafted == 0
    assert first_text == second_text
    assert "vocabulary size differs" in refusal and mode_after == "draft"  # the loaded model stays as it was


def test_drafts_are_settled_on_the_tokens_kept_and_proposals_follow_how_they_fare():
    import numpy as np

    from app.backends.llamacpp.speculation import CountedDrafts

    proposals = iter([[7, 8, 9, 10], [1, 2, 3, 4, 5, 6, 7, 8], [4, 4], [9]])
    drafts = CountedDrafts(lambda _ids: np.array(next(proposals)), n_ctx=100, limit=6)
    drafts.begin_reply()
    assert list(drafts(np.array([1, 2, 3]))) == [7, 8, 9, 10]
    assert list(drafts(np.array([1, 2, 3, 7, 8, 9, 10, 11]))) == [1, 2, 3, 4, 5, 6]  # all 4 kept: up to 8, cut at 6
    assert (drafts.drafted, drafts.accepted, drafts.length) == (10, 4, 6)
    assert list(drafts(np.array([1, 2, 3, 7, 8, 9, 10, 11, 1, 2, 0]))) == [4, 4]  # 2 kept, the third rejected
    assert (drafts.accepted, drafts.length) == (6, 3)
    drafts.settle([1, 2, 3, 7, 8, 9, 10, 11, 1, 2, 0, 5])  # the reply ended: the pending proposal kept nothing
    assert (drafts.drafted, drafts.accepted, drafts.length) == (12, 6, 1)


def test_speculation_loads_with_flash_attention_and_verifies_at_most_the_invariant_width(models):
    """Flash attention and at most ``INVARIANT_ROWS`` rows per verification decode: the settings under which
    llama.cpp's CPU kernels give a batch row the logits of a lone token (without flash attention the starter model's
    rows differed from the first batch of 2 on; see the speculation module's docstring)."""
    import llama_cpp

    from app.backends.llamacpp.speculation import INVARIANT_ROWS

    model, twin, _ = models
    enabled = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    for setting in ("ngram", f"draft:{twin}"):
        engine = _engine(model, setting)
        try:
            assert engine.llm.context_params.flash_attn_type == enabled
            assert engine.speculation is not None and engine.speculation.widest_batch <= INVARIANT_ROWS
            widths = _record_widths(engine.llm)
            _, counts, _ = _complete(engine)
        finally:
            engine.unload()
        verifications = widths[1:]  # after the prompt's
        assert counts["spec_drafted"] > 0 and max(verifications) > 1
        assert max(verifications) <= INVARIANT_ROWS, setting
    plain = _engine(model, "off", flash_attn=False)
    try:
        assert plain.llm.context_params.flash_attn_type != enabled  # without speculation: the load's own setting
    finally:
        plain.unload()


def _record_widths(llm: Any) -> list[int]:
    """The number of tokens of each ``decode`` of ``llm``, from now on."""
    widths: list[int] = []
    decode = llm._ctx.decode

    def recording(batch: Any) -> None:
        widths.append(batch.n_tokens())
        decode(batch)

    llm._ctx.decode = recording
    return widths


def test_with_flash_attention_a_verification_row_has_the_bits_of_a_lone_token(models):
    """Raw llama-cpp-python: the same tokens decoded one at a time and in batches of 2-7 (each followed by a rejected
    row, removed again) give bit-identical logits for every row."""
    import llama_cpp
    import numpy as np

    from app.backends.llamacpp.speculation import INVARIANT_ROWS

    model, _, _ = models
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=512, flash_attn=True, verbose=False)
    try:
        prompt = llm.tokenize(REPEATING.encode(), add_bos=True)
        tokens = [int(t) for t in llm.tokenize(b" the cat sat on the mat. the dog sat on the log.", add_bos=False)]

        def logits(i: int) -> Any:
            return np.ctypeslib.as_array(llm._ctx.get_logits_ith(i), shape=(llm.n_vocab(),)).copy()

        def rows(width: int) -> list[Any]:
            llm._ctx.kv_cache_clear()
            llm._batch.set_batch(batch=prompt, n_past=0, logits_all=False)
            llm._ctx.decode(llm._batch)
            found = []
            for start in range(0, len(tokens), width):
                batch = tokens[start : start + width]
                rejected = [tokens[0]] if len(batch) < INVARIANT_ROWS else []
                llm._batch.set_batch(batch=batch + rejected, n_past=len(prompt) + start, logits_all=True)
                llm._ctx.decode(llm._batch)
                found += [logits(j) for j in range(len(batch))]
                llm._ctx.kv_cache_seq_rm(-1, len(prompt) + start + len(batch), -1)
            return found

        alone = rows(1)
        for width in range(2, INVARIANT_ROWS + 1):
            batched = rows(width)
            assert all(np.array_equal(a, b) for a, b in zip(alone, batched, strict=True)), width
    finally:
        llm.close()
