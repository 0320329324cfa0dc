"""The Monitor's llama.cpp parallel slots card: off, it says how to turn parallel requests on; fed the engine host's
``ParallelSlotsChanged`` events, it shows each slot's state, context cells of its n_ctx, client and request, and
the requests waiting beyond N; on the real parallel engine behind the real API server, two streams show as two
generating slots and the engine joins the monitor's engines with its cells. The page fits 1024×700 and is
captured at 1366×768 and 1024×700, light and dark, in build/screenshots/."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from PySide6.QtWidgets import QScrollArea

from app.services.engines.entries import EngineKind
from app.services.engines.events import ParallelSlotsChanged, ParallelSnapshot, SlotView
from app.services.monitor.engine_processes import PARALLEL
from tests.support.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakePynvml
from tests.support.gguf_factory import write_tiny_gguf
from tests.support.layout import assert_fits
from tests.support.page_frame import themed, window_frame
from tests.support.waiting import until
from tests.ui.test_monitor_panel import make_panel  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(240)

SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
SIZES = ((1366, 768), (1024, 700))
NO_GPU = FakePynvml([], init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
ENTRY = "/models/tiny-8k.gguf"
BUSY = ParallelSnapshot(
    ENTRY,
    (
        SlotView(0, "decoding", 812, 4096, "127.0.0.1:50412", "7", generated=37),
        SlotView(1, "prefilling", 300, 4096, "127.0.0.1:50413", "8"),
        SlotView(2, "idle", 120, 4096),
    ),
    waiting=2,
    pid=4242,
)


def rows(panel) -> list[tuple[str, str, str, str]]:
    return [(r.number.text(), r.state.text(), r.cells.text(), r.owner.text()) for r in panel.slots_view.rows]


async def capture(panel, frame, name: str, theme: str) -> None:
    """The page at both sizes, scrolled to the slots card; each size must fit the window's minimum."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width, height in SIZES:
        frame.resize(width, height)
        await asyncio.sleep(0.05)  # the layout settles (what is asserted below does not depend on it)
        assert (frame.width(), frame.height()) == (width, height)
        assert_fits(frame, (width, height))
        panel.findChild(QScrollArea).ensureWidgetVisible(panel.slots_view)
        path = SHOTS / f"monitor-parallel-{name}_{width}x{height}_{theme}.png"
        assert frame.grab().save(str(path))


def emit(panel, snapshot: ParallelSnapshot) -> None:
    panel.workstation.host.emit(ParallelSlotsChanged(EngineKind.LLAMACPP, snapshot))


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_slots_states_cells_clients_and_the_queue_from_host_events(qloop, make_panel, theme) -> None:  # noqa: F811
    async def scenario():
        with themed(theme):
            panel = await make_panel(NO_GPU, lambda: [])
            with window_frame(panel) as frame:
                view = panel.slots_view
                assert view.title_label.text() == "llama.cpp parallel slots: off"
                assert "API server" in view.off_text.text() and "Parallel sequences" in view.off_text.text()
                assert view.off_text.isVisible() and not view.table.isVisible()
                await capture(panel, frame, "off", theme)
                emit(panel, BUSY)
                await until(lambda: len(view.rows) == 3, 10)
                assert rows(panel) == [
                    ("#0", "generating", "812 / 4,096", "127.0.0.1:50412 · request 7 · 37 tokens"),
                    ("#1", "prefill", "300 / 4,096", "127.0.0.1:50413 · request 8"),
                    ("#2", "idle", "120 / 4,096", "—"),
                ]
                assert view.rows[0].cells.value() == 20  # 812 of 4,096 cells
                assert view.summary.text() == "tiny-8k.gguf · 2 of 3 slots busy · 1,232 / 12,288 cells · pid 4242"
                assert view.waiting.text() == "2 waiting for a free slot." and view.waiting.isVisible()
                assert not view.off_text.isVisible()
                await capture(panel, frame, "busy", theme)
                emit(panel, ParallelSnapshot(ENTRY, BUSY.slots[:2]))  # fewer slots (a reload), nobody waiting
                await until(lambda: len(view.rows) == 2, 10)
                assert view.waiting.text() == "No request waiting for a slot."
                emit(panel, ParallelSnapshot())  # the engine stopped (the server was stopped)
                await until(lambda: view.off_text.isVisible(), 10)
                assert view.title_label.text().endswith(": off") and not view.table.isVisible()

    qloop.run_until_complete(scenario())


def test_events_while_hidden_show_when_the_page_is_shown_again(qloop, make_panel) -> None:  # noqa: F811
    async def scenario():
        panel = await make_panel(NO_GPU, lambda: [])
        panel.hide()
        emit(panel, BUSY)
        assert panel.parallel == BUSY and panel.slots_view.rows == []  # kept, not drawn while hidden
        panel.show()
        await until(lambda: len(panel.slots_view.rows) == 3, 10)

    qloop.run_until_complete(scenario())


@pytest.fixture(scope="module")
def parallel_models(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("parallel-monitor")
    write_tiny_gguf(folder / "tiny-8k.gguf", context_length=8192, name="tiny-8k", never_eos=True)
    return folder


class Stream:
    """A streamed chat that generates until it is closed (the model never ends by itself), read as it comes."""

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.chunks = 0
        self.reader = asyncio.get_running_loop().create_task(self._read(client, url))

    async def _read(self, client: httpx.AsyncClient, url: str) -> None:
        body = {"model": "tiny-8k", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3000, "stream": True}
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: {") and json.loads(line[6:]).get("choices"):
                    self.chunks += 1

    async def close(self) -> None:
        """The client goes away: its connection closes."""
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)


def test_two_real_streams_show_as_two_generating_slots(qloop, make_panel, parallel_models) -> None:  # noqa: F811
    from app.services.api.config import ServerConfig

    async def scenario():
        panel = await make_panel(NO_GPU, None)  # the monitor watches the workstation's engine host
        api = panel.workstation.api
        api.also_serve([parallel_models])
        url = await api.start(ServerConfig(port=0, n_parallel=2, n_ctx=4096))
        view = panel.slots_view
        async with httpx.AsyncClient(timeout=120) as client:
            streams = [Stream(client, url), Stream(client, url)]
            with themed("light"), window_frame(panel) as frame:
                try:
                    await until(lambda: all(s.chunks > 1 for s in streams), 60)  # both are generating
                    await two_generating_slots_shown(panel)
                    await capture(panel, frame, "real", "light")
                finally:
                    for stream in streams:
                        await stream.close()
                await until(lambda: all(r.state.text() == "idle" for r in view.rows), 60)  # the clients went away
                assert all(r.owner.text() == "—" for r in view.rows)
        await api.stop()

    qloop.run_until_complete(scenario())


async def two_generating_slots_shown(panel) -> None:
    """Both slots generating, with their clients and cells; the engine among the monitor's, with its cells."""
    view = panel.slots_view
    generating = lambda: [r.state.text() for r in view.rows] == ["generating"] * 2  # noqa: E731
    await until(lambda: generating() and all(r.cells.value() > 0 for r in view.rows), 60)
    owners = [r.owner.text() for r in view.rows]
    assert all(o.startswith("127.0.0.1:") and " · request " in o for o in owners), owners
    assert "tiny-8k.gguf · 2 of 2 slots busy" in view.summary.text()
    assert "/ 8,192 cells" in view.summary.text()  # each slot has the full 4,096
    await until(lambda: _parallel_engine(panel) is not None, 30)
    engine = _parallel_engine(panel)
    assert engine.kv.total_cells == 2 * 4096 and engine.kv.used_cells > 0
    assert "llama.cpp parallel (2 slots): tiny-8K" in panel.engines_view.summary.text()
    speed = lambda: (e := _parallel_engine(panel)) is not None and (e.kv.generation_tokens_per_s or 0) > 0  # noqa: E731
    await until(speed, 30)  # its tokens/s, from the engine's count of sampled tokens (the tok/s chart's)
    assert all(" tokens" in r.owner.text() for r in view.rows)  # each slot's tokens so far


def _parallel_engine(panel):
    latest = panel.latest
    return next((e for e in latest.engines if e.kind == PARALLEL and e.kv), None) if latest else None
