"""``bench spec``: speculative decoding against none, on one model, in one run.

Modes: off, n-gram lookup, and a draft model when one is given. Each mode loads the model through the app's engine
host (its llama.cpp worker) and writes the same fixed prompts at temperature 0 (no repeat penalty: plain greedy)
as text completions, so a base model without a chat template copies too. Prompts are of two kinds: *copy* (copy,
edit, extract: the reply repeats text of the prompt, where drafts are accepted) and *free* (free writing). Each
mode runs ``rounds`` times, the modes interleaved round by round; a prompt's figure is its best round (other
processes only ever slow a run down). The text of every speculative reply is compared with the reply without
speculation: a difference is reported as a mismatch, with where it starts. Every mode loads with flash attention
on, as speculation loads (``speculation.LOAD_KWARGS``: its verification rows are then bit-identical to decoding one
token at a time), so the text and the speed are compared at the same numerics.

Last, the *guarded* run: n-gram lookup with the app's speculation guard watching (``spec_guard``: it takes some
replies without speculation and turns it off when it is slower), on the free prompts several times over, and the
same replies without speculation right after it, ``rounds`` times: the "it does no harm" figure is the guarded
replies' tok/s over the plain ones' (all tokens over all decode time, the two interleaved round by round).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from app.backends.llamacpp.backend import LlamaCppBackend
from app.backends.llamacpp.repack import NO_REPACK_ENV
from app.backends.llamacpp.speculation import LOAD_KWARGS
from app.core.params import LoadParams, SamplingParams
from app.core.speculative import acceptance
from app.devtools.chat_bench import repacking_off_here
from app.services.engines.entries import EngineKind
from app.services.engines.host import EngineHost
from app.services.engines.spec_guard import SpeculationGuard

_PARAGRAPH = (
    "The lighthouse stood at the edge of the cliff, its white tower streaked with salt. Every evening the keeper "
    "climbed the one hundred and twelve steps, lit the lamp, and wrote the weather in a small blue notebook. Ships "
    "passed far out at sea, and none of them knew his name."
)
_RECIPE = (
    "Preheat the oven to 200 degrees. Mix the flour, the salt and the yeast in a large bowl. Add the warm water "
    "slowly and knead the dough for ten minutes, until it is smooth. Leave it to rise for one hour, then shape the "
    "loaf and bake it for thirty-five minutes."
)
_CODE = (
    "def total_price(items):\n    total = 0\n    for item in items:\n        total += item.price * item.quantity\n"
    "    return total\n\n\ndef average_price(items):\n    if not items:\n        return 0\n"
    "    return total_price(items) / len(items)\n"
)
COPY_PROMPTS = (
    ("copy-paragraph", f"Here is a paragraph:\n\n{_PARAGRAPH}\n\nThe same paragraph, copied word for word:\n\n"),
    ("edit-recipe", f"Original recipe:\n\n{_RECIPE}\n\nThe same recipe, with 'bowl' written as 'basin':\n\n"),
    ("edit-code", f"Original code:\n\n{_CODE}\n\nThe same code, with 'items' renamed to 'products':\n\n"),
    ("extract-sentences", f"Text:\n\n{_PARAGRAPH} {_RECIPE}\n\nThe sentences above that mention a number:\n\n"),
)
FREE_PROMPTS = (
    ("story", "Once upon a time, in a village at the foot of the mountains, there lived"),
    ("diary", "Dear diary, today the weather finally changed, and after breakfast I walked down to the harbour where"),
    ("essay", "The history of the bicycle is a story of many inventors. In the early nineteenth century,"),
    ("letter", "My dear sister, it has been three months since I left home, and so much has happened that"),
)
KINDS = {name: "copy" for name, _ in COPY_PROMPTS} | {name: "free" for name, _ in FREE_PROMPTS}
GUARDED_PASSES = 3  # the free prompts, this many times over, with the guard watching (and without speculation)


@dataclass
class PromptRun:
    prompt: str  # its name
    text: str
    completion_tokens: int
    decode_tokens_per_s: float
    drafted: int = 0
    accepted: int = 0

    @property
    def decode_seconds(self) -> float:
        return (self.completion_tokens - 1) / self.decode_tokens_per_s if self.decode_tokens_per_s else 0.0


@dataclass
class ModeResult:
    mode: str  # "off", "ngram", "draft"
    speculative: str  # the load setting
    runs: dict[str, PromptRun] = field(default_factory=dict)  # the best round of each prompt

    def keep(self, run: PromptRun) -> None:
        best = self.runs.get(run.prompt)
        if best is None or run.decode_tokens_per_s > best.decode_tokens_per_s:
            self.runs[run.prompt] = run


def _rate(runs: list[PromptRun]) -> float | None:
    seconds = sum(r.decode_seconds for r in runs)
    return sum(r.completion_tokens - 1 for r in runs) / seconds if seconds else None


def _sampling(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, repeat_penalty=1.0, max_tokens=max_tokens, seed=0)


async def _complete(host: EngineHost, name: str, prompt: str, max_tokens: int) -> PromptRun:
    reply = host.complete(EngineKind.LLAMACPP, prompt, _sampling(max_tokens))
    parts = [delta.text async for delta in reply]
    stats = reply.stats
    assert stats is not None
    return PromptRun(
        name, "".join(parts), stats.completion_tokens, stats.decode_tokens_per_s or 0.0,
        stats.spec_drafted, stats.spec_accepted,
    )  # fmt: skip


async def _run_mode(host: EngineHost, model: str, load: LoadParams, result: ModeResult, max_tokens: int) -> None:
    await host.load(model, load)
    await _complete(host, "warm-up", FREE_PROMPTS[0][1], 8)
    for name, prompt in COPY_PROMPTS + FREE_PROMPTS:
        result.keep(await _complete(host, name, prompt, max_tokens))


async def _free_passes(host: EngineHost, max_tokens: int) -> list[PromptRun]:
    return [
        await _complete(host, name, prompt, max_tokens) for _ in range(GUARDED_PASSES) for name, prompt in FREE_PROMPTS
    ]


async def _guarded(host: EngineHost, model: str, load: LoadParams, max_tokens: int, rounds: int) -> dict[str, Any]:
    """The free prompts with n-gram lookup under a fresh guard, then without speculation, ``rounds`` times: the
    replies of each, and what the guards decided."""
    guarded: list[PromptRun] = []
    plain: list[PromptRun] = []
    messages: list[str] = []
    for _ in range(rounds):
        guard = SpeculationGuard(host)
        try:
            await host.load(model, _with(load, "ngram"))
            guarded += await _free_passes(host, max_tokens)
            messages += guard.messages
        finally:
            guard.close()
        await host.load(model, _with(load, "off"))
        plain += await _free_passes(host, max_tokens)
    return {"runs": guarded, "plain": plain, "messages": messages}


async def bench_spec(
    model: str, load: LoadParams, draft: str | None, max_tokens: int, rounds: int
) -> dict[str, Any]:  # fmt: skip
    """Every mode ``rounds`` times, interleaved, then the guarded run; the report (see ``report``)."""
    if repacking_off_here():  # as the app's worker runs here: llama.cpp's repacked kernels crashed on this machine
        os.environ[NO_REPACK_ENV] = "1"
    load = LoadParams.from_dict({**load.to_dict(), **LOAD_KWARGS})  # "off" too: the numerics speculation runs at
    modes = [ModeResult("off", "off"), ModeResult("ngram", "ngram")]
    if draft:
        modes.append(ModeResult("draft", f"draft:{draft}"))
    host = EngineHost(LlamaCppBackend())
    try:
        for _ in range(rounds):
            for result in modes:
                await _run_mode(host, model, _with(load, result.speculative), result, max_tokens)
        guarded = await _guarded(host, model, load, max_tokens, rounds)
    finally:
        await host.close()
    return report(model, load, max_tokens, rounds, modes, guarded)


def _with(load: LoadParams, speculative: str) -> LoadParams:
    return LoadParams.from_dict({**load.to_dict(), "speculative": speculative})


def report(
    model: str, load: LoadParams, max_tokens: int, rounds: int, modes: list[ModeResult], guarded: dict[str, Any]
) -> dict[str, Any]:
    off = modes[0]
    rows = [_mode_row(result, off) for result in modes]
    mismatches = [m for result in modes[1:] for m in _mismatches(result, off)]
    return {
        "model": model,
        "n_ctx": load.n_ctx,
        "max_tokens": max_tokens,
        "rounds": rounds,
        "repacking_off": os.environ.get(NO_REPACK_ENV, "") not in ("", "0"),
        "flash_attn": load.flash_attn,
        "modes": rows,
        "guarded_free": _guarded_row(guarded),
        "mismatches": mismatches,
        "identical": not mismatches,
        "prompts": {result.mode: {n: asdict(r) for n, r in result.runs.items()} for result in modes},
    }


def _mode_row(result: ModeResult, off: ModeResult) -> dict[str, Any]:
    row: dict[str, Any] = {"mode": result.mode}
    for kind in ("copy", "free"):
        runs = [r for n, r in result.runs.items() if KINDS[n] == kind]
        rate, off_rate = _rate(runs), _rate([r for n, r in off.runs.items() if KINDS[n] == kind])
        drafted, accepted = sum(r.drafted for r in runs), sum(r.accepted for r in runs)
        row[kind] = {
            "decode_tokens_per_s": rate,
            "ratio_vs_off": rate / off_rate if rate and off_rate else None,
            "drafted": drafted,
            "accepted": accepted,
            "acceptance": acceptance(drafted, accepted),
        }
    return row


def _mismatches(result: ModeResult, off: ModeResult) -> list[dict[str, Any]]:
    found = []
    for name, run in result.runs.items():
        plain = off.runs[name].text
        if run.text != plain:
            at = next((i for i, (a, b) in enumerate(zip(run.text, plain, strict=False)) if a != b), None)
            at = min(len(run.text), len(plain)) if at is None else at
            start = max(at - 20, 0)
            found.append({"mode": result.mode, "prompt": name, "kind": KINDS[name], "differs_at_char": at,
                          "off": plain[start : at + 40], "speculative": run.text[start : at + 40]})  # fmt: skip
    return found


def _guarded_row(guarded: dict[str, Any]) -> dict[str, Any]:
    """The guarded replies' rate against the same replies' without speculation."""
    runs: list[PromptRun] = guarded["runs"]
    rate, plain_rate = _rate(runs), _rate(guarded["plain"])
    return {
        "replies": len(runs),
        "speculated": sum(1 for r in runs if r.drafted),
        "decode_tokens_per_s": rate,
        "off_decode_tokens_per_s": plain_rate,
        "ratio_vs_off": rate / plain_rate if rate and plain_rate else None,
        "guard_messages": guarded["messages"],
    }


def report_lines(r: dict[str, Any]) -> list[str]:
    lines = [
        f"model {r['model']}  n_ctx {r['n_ctx']}  max_tokens {r['max_tokens']}  rounds {r['rounds']} (best per prompt)"
        f"{'  (llama.cpp repacking off)' if r['repacking_off'] else ''}"
        f"{'  flash attention on' if r.get('flash_attn') else ''}",
        f"{'mode':<7}{'copy/edit/extract tok/s':>26}{'ratio':>8}{'accept':>9}"
        f"{'free tok/s':>13}{'ratio':>8}{'accept':>9}",
    ]
    for row in r["modes"]:
        copy, free = row["copy"], row["free"]
        lines.append(f"{row['mode']:<7}{_num(copy['decode_tokens_per_s']):>26}{_ratio(copy)}{_share(copy)}"
                     f"{_num(free['decode_tokens_per_s']):>13}{_ratio(free)}{_share(free)}")  # fmt: skip
    guarded = r["guarded_free"]
    lines.append(
        f"free writing, n-gram with the guard on: {_num(guarded['decode_tokens_per_s'])} tok/s vs "
        f"{_num(guarded['off_decode_tokens_per_s'])} off, {_num(guarded['ratio_vs_off'], 3)}x "
        f"({guarded['speculated']} of {guarded['replies']} replies speculated)"
    )
    lines += [f"  guard: {message}" for message in guarded["guard_messages"]]
    if r["identical"]:
        lines.append("text: every speculative reply is identical to the reply without speculation")
    for m in r["mismatches"]:
        lines.append(f"TEXT MISMATCH: {m['mode']} on {m['prompt']} ({m['kind']}) differs from off at character "
                     f"{m['differs_at_char']}: off {m['off']!r} / {m['mode']} {m['speculative']!r}")  # fmt: skip
    return lines


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(figures: dict[str, Any]) -> str:
    return f"{_num(figures['ratio_vs_off'], 2) + 'x':>8}"


def _share(figures: dict[str, Any]) -> str:
    rate = figures["acceptance"]
    return f"{'-' if rate is None else f'{rate:.0%}':>9}"
