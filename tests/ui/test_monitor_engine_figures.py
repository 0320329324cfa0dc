"""The Monitor's engines card shows speculative acceptance (vLLM from /metrics, llama.cpp from the engine host's
last reply figures), vLLM's host KV tier with a host swap lower bound, and prompt tokens cached by source; the
window still fits 1024×700."""

from __future__ import annotations

import os

import pytest

from app.backends.protocol import KvUsage
from app.core.chat.conversation import ReplyStats
from app.services.engines.entries import EngineKind
from app.services.engines.events import ReplyFigures
from app.services.monitor.engine_processes import EngineTarget, vllm_target
from tests.services.test_monitor_engine_figures import GIB, RECORDED, with_host_tier
from tests.support.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakePynvml
from tests.support.layout import assert_fits
from tests.support.page_frame import themed, window_frame
from tests.support.waiting import until
from tests.ui.test_monitor_panel import make_panel  # noqa: F401 (the fixture)

PAGE = with_host_tier(RECORDED, stored=3 * GIB, loaded=GIB, cached_host=256.0)


def both_engines() -> list[EngineTarget]:
    return [
        EngineTarget("llamacpp", "llama.cpp: tiny", True, os.getpid(), KvUsage(120, 512, {0: 120})),
        vllm_target("http://127.0.0.1:8000", label="vLLM: tiny-llama"),
    ]


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_engine_figures_from_metrics_and_the_last_llama_reply(qloop, make_panel, theme) -> None:  # noqa: F811
    async def scenario():
        with themed(theme):
            panel = await make_panel(FakePynvml([], init_error=NVML_ERROR_LIBRARY_NOT_FOUND), both_engines, PAGE)
            with window_frame(panel) as frame:
                figures = panel.engines_view.figures
                await until(lambda: panel.latest is not None and len(panel.latest.engines) == 2, 10)
                await until(lambda: figures.isVisible(), 10)
                text = figures.text()
                assert "vLLM speculative decoding: 77% of drafted tokens accepted · 3.4 tokens per step" in text
                assert "vLLM host KV tier of 4.0 GiB: stored 3.0 GiB" in text and "loaded 1.0 GiB" in text
                assert "host swap ≥ 4.0 GiB (a lower bound" in text
                assert "Prompt tokens served from cache: host 256" in text
                assert "llama.cpp speculative" not in text
                stats = ReplyStats(spec_mode="ngram", spec_drafted=80, spec_accepted=50)
                panel.workstation.host.emit(ReplyFigures(EngineKind.LLAMACPP, stats, None))
                line = "llama.cpp speculative decoding (n-gram lookup), last reply: 62% of 80 drafted tokens accepted"
                await until(lambda: line in figures.text(), 10)
                assert_fits(frame)

    qloop.run_until_complete(scenario())


def test_no_speculation_and_no_tier_say_nothing(qloop, make_panel) -> None:  # noqa: F811
    async def scenario():
        page = RECORDED.replace("spec_decode_num_", "spec_decode_gone_")
        panel = await make_panel(FakePynvml([]), lambda: [vllm_target("http://127.0.0.1:8000")], page)
        await until(lambda: panel.latest is not None and panel.latest.engines, 10)
        await until(lambda: panel.engines_view.figures.text() == "Prompt tokens served from cache: none yet", 10)
        stats = ReplyStats()  # a llama.cpp reply without speculation, and no llama.cpp engine listed
        panel.workstation.host.emit(ReplyFigures(EngineKind.LLAMACPP, stats, None))
        panel.redraw()
        assert "speculative" not in panel.engines_view.figures.text()

    qloop.run_until_complete(scenario())
