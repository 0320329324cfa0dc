"""Speculative decoding on a loaded ``Llama``, through llama-cpp-python's own ``generate`` loop.

``Llama.generate`` calls ``llm.draft_model(input_ids)`` after each sampled token and evaluates the token and the
drafts in one batch, then samples at every position of that batch, keeping drafts while the sampled token equals
the draft (greedy verification: at temperature 0 the text is the text without speculation; at a higher
temperature every token is still sampled from the model's own distribution). Grammars and repeat penalties see
only the tokens kept, because the sampler accepts what it samples.

Passing ``draft_model=`` to ``Llama(...)`` would also turn on ``logits_all``: a copy of every position's logits
into ``llm.scores`` (n_ctx × n_vocab floats: gigabytes for a 256k vocabulary) and logits for every prompt token.
Instead the drafter is set on the loaded model and ``install_eval`` asks llama.cpp for the logits of every token
only in a verification batch (the sampled token and its drafts), copying none.

``CountedDrafts`` counts per reply: drafted (tokens proposed) and accepted (drafts the model kept). It also sizes
proposals to how they fare: a verification batch costs more the wider it is (on a CPU, the output layer alone is
computed once per row), so after a rejection the next proposal holds one token more than were accepted, and after a
full acceptance twice as many, up to the drafter's own length. N-gram lookup proposes only where the last two tokens
occurred before (a single repeated token is no evidence that the text repeats).

Greedy verification gives the text without speculation only if a token's logits are the same bits whether it is
decoded alone or as a row of a verification batch. llama.cpp's CPU kernels make that so only with flash attention
(measured on the starter model, gemma-3 270M Q4_K_M, raw llama-cpp-python, the reply's own tokens forced through):
- without it, attention is two F16 matrix products that take ``ggml_vec_dot_f16`` for one token and tinyBLAS
  (ggml-cpu/llamafile/sgemm.cpp, ``n < 2`` falls back) for two or more, which sum in another order: in batches of
  2 rows, 93 of 95 rows differed (logits by up to 1.85), from the first batch on; the weights' own products (Q5_0,
  Q8_0, Q4_K, Q6_K) do not depend on the batch width up to 7 rows;
- with it, each row of a batch of 2-7 tokens goes through ``flash_attn_ext_f16_one_chunk`` as a lone token does:
  no row differed in batches of 2 to 7 (2 prompts × 95 rows), on 1 or 2 threads, with rejected rows' cells written
  and removed; in batches of 8 most rows differ (not traced further).
So speculation loads the model with flash attention (``LOAD_KWARGS``; as fast as without it here: 23.4 vs 22.6
tok/s) and verifies at most ``INVARIANT_ROWS`` rows at once (a draft model drafts 6). One case stays open: past 256
tokens of context (llama.cpp pads the KV view to 256 cells) a lone token takes flash attention's split-KV path, a
chunk of cells per thread, merged: on more than one decoding thread it differs from a batch row (273- and 681-token
prompts: every row differs on 2 threads, none on 1). ``n_threads`` defaults to half the cores: one on 2 cores.
Only the worker imports this module; ``llama_cpp`` is imported on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.gguf.draft_compat import check_draft
from app.core.speculative import DRAFT, NGRAM, OFF, SpeculativeSetting

NGRAM_SIZE = 3  # the longest n-gram looked up in the text so far
# tokens copied after a match. Measured on the starter model (bench spec, separate runs on a shared 2-core machine):
# 3 as fast as 10 (copy prompts 2.02x vs 1.91x, free writing 1.56x vs 1.43x; before flash attention, so texts still
# differed): on a CPU every verified row costs its output layer
NGRAM_DRAFT_TOKENS = 3
# the most rows a verification batch may hold: with flash attention, rows of up to 7 are bit-identical to lone tokens
INVARIANT_ROWS = 7
LOAD_KWARGS = {"flash_attn": True}  # what speculation needs of the model's context (see the module docstring)
Proposer = Callable[[Any], Any]  # input ids (numpy) -> draft ids (numpy)


def draft_refusal(setting: SpeculativeSetting, model_path: str) -> str | None:
    """Why the draft model of ``setting`` cannot draft for ``model_path`` (the failed check, in words), or None."""
    if setting.mode != DRAFT or setting.draft_path is None:
        return None
    draft = Path(setting.draft_path)
    if not draft.is_file():
        return f'The draft model {draft} does not exist. Choose a GGUF file, or use n-gram lookup ("ngram").'
    verdict = check_draft(draft, model_path)
    if verdict.ok:
        return None
    return (
        f"{draft.name} cannot draft for {Path(model_path).name}: {verdict.reason}. A draft model needs the same "
        "tokenizer; choose another one (usually a smaller model of the same family), or use n-gram lookup."
    )


@dataclass
class CountedDrafts:
    """A drafter that counts: ``drafted`` tokens proposed this reply, ``accepted`` those the model kept.

    A proposal made at position p is settled when the sequence past p is known: at the next proposal (the
    model's tokens then fill those positions) or at the reply's end (``settle`` with the reply's tokens)."""

    propose: Proposer
    n_ctx: int
    limit: int  # the most drafts one proposal holds
    drafted: int = 0
    accepted: int = 0
    length: int = 0  # the most the next proposal may hold (adapts; 0: the limit)
    _pending: tuple[int, list[int]] | None = None

    def begin_reply(self) -> None:
        self.drafted = self.accepted = 0
        self._pending = None
        self.length = self.limit

    def __call__(self, input_ids: Any) -> Any:
        self.settle(input_ids)
        room = max(self.n_ctx - len(input_ids), 0)  # what ``generate`` keeps of a proposal
        drafts = self.propose(input_ids)[: min(room, self.length or self.limit)]
        self._pending = (len(input_ids), [int(t) for t in drafts])
        self.drafted += len(drafts)
        return drafts

    def settle(self, sequence: Sequence[int] | Any) -> None:
        """Count the pending proposal's drafts that ``sequence`` (all tokens so far) kept, in order."""
        if self._pending is None:
            return
        start, drafts = self._pending
        self._pending = None
        kept = 0
        for offset, draft in enumerate(drafts):
            if start + offset >= len(sequence) or int(sequence[start + offset]) != draft:
                break
            kept += 1
        self.accepted += kept
        if drafts:
            full = kept == len(drafts)
            self.length = min(self.limit, 2 * len(drafts)) if full else kept + 1


@dataclass
class Speculation:
    """The speculative decoding attached to one loaded model."""

    mode: str  # NGRAM or DRAFT
    drafts: CountedDrafts
    widest_batch: int  # the sampled token and the most drafts one proposal holds
    draft_llm: Any = None  # DRAFT: the second ``Llama``

    def close(self) -> None:
        if self.draft_llm is not None:
            self.draft_llm.close()
            self.draft_llm = None


def attach(llm: Any, setting: SpeculativeSetting, draft_kwargs: dict[str, Any]) -> Speculation | None:
    """Speculative decoding on ``llm`` as ``setting`` asks (None for "off"); ``draft_kwargs``: how to load a draft
    model (the target's own context size and offload)."""
    if setting.mode == OFF:
        return None
    if setting.mode == NGRAM:
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        lookup = LlamaPromptLookupDecoding(max_ngram_size=NGRAM_SIZE, num_pred_tokens=NGRAM_DRAFT_TOKENS)
        drafts = CountedDrafts(_after_a_repeated_pair(lookup), int(llm.n_ctx()), NGRAM_DRAFT_TOKENS)
        speculation = Speculation(NGRAM, drafts, NGRAM_DRAFT_TOKENS + 1)
    else:
        from app.backends.llamacpp.draft_model import DRAFT_TOKENS, SmallModelDrafter, load_draft_llama

        draft_llm = load_draft_llama(str(setting.draft_path), draft_kwargs)
        drafter = SmallModelDrafter(draft_llm, DRAFT_TOKENS)
        drafts = CountedDrafts(drafter, int(llm.n_ctx()), DRAFT_TOKENS)
        speculation = Speculation(DRAFT, drafts, DRAFT_TOKENS + 1, draft_llm)
    llm.draft_model = speculation.drafts
    install_eval(llm, speculation.widest_batch)
    return speculation


def _after_a_repeated_pair(lookup: Proposer) -> Proposer:
    """``lookup``, asked only when the text's last two tokens occurred together before."""

    def propose(input_ids: Any) -> Any:
        import numpy as np

        if len(input_ids) < 3:
            return np.array([], dtype=np.intc)
        first, second = input_ids[-2], input_ids[-1]
        if not np.any((input_ids[:-3] == first) & (input_ids[1:-2] == second)):
            return np.array([], dtype=np.intc)
        return lookup(input_ids)

    return propose


def install_eval(llm: Any, widest_batch: int) -> None:
    """Replace ``llm.eval`` (as llama-cpp-python 0.3 writes it) by one that asks the logits of every token of a
    batch of at most ``widest_batch`` tokens while a drafter is set, and copies no logits into ``llm.scores``
    (``generate`` samples from the context itself).

    A verification batch is a decoding step, so it runs on the decoding threads (``n_threads``), not the prompt's
    (``n_threads_batch``, by default every core): measured on a busy 2-core machine, verification on both cores
    stalled for seconds whenever another process took one of them, while decoding on one went on undisturbed.
    ``widest_batch`` is at most ``INVARIANT_ROWS`` (one decode: ``generate`` samples from the last decode's rows)."""
    assert widest_batch <= INVARIANT_ROWS, widest_batch
    import llama_cpp

    def speculative_eval(tokens: Sequence[int]) -> None:
        llm._ctx.kv_cache_seq_rm(-1, llm.n_tokens, -1)
        every = llm.draft_model is not None and len(tokens) <= widest_batch
        batch_threads = llm.n_threads if every else llm.n_threads_batch
        llama_cpp.llama_set_n_threads(llm._ctx.ctx, llm.n_threads, batch_threads)
        for i in range(0, len(tokens), llm.n_batch):
            batch = tokens[i : min(len(tokens), i + llm.n_batch)]
            n_past = llm.n_tokens
            llm._batch.set_batch(batch=batch, n_past=n_past, logits_all=every)
            llm._ctx.decode(llm._batch)
            llm.input_ids[n_past : n_past + len(batch)] = batch
            llm.n_tokens += len(batch)
            llm._requires_eval = False

    llm.eval = speculative_eval
