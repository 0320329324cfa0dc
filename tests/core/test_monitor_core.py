"""Pure monitor parts: snapshot shape, bounded series, CSV, alerts."""

from __future__ import annotations

import csv
import io
import json

import pytest

from app.core.monitor.alerts import Alert, AlertThresholds, AlertTracker
from app.core.monitor.snapshot import (
    EngineReading,
    GpuProcess,
    GpuReading,
    KvReading,
    MonitorSnapshot,
    RamReading,
)
from app.core.monitor.timeseries import SERIES, MonitorHistory, RingSeries

GIB = 1024**3


def gpu(used: int | None = 10 * GIB, total: int | None = 80 * GIB) -> GpuReading:
    return GpuReading(
        0,
        "NVIDIA H100",
        "GPU-1",
        total,
        used,
        None,
        50,
        60,
        300_000,
        700_000,
        1900,
        2600,
        (GpuProcess(42, "python", 9 * GIB),),
    )


def snap(t: float = 0.0, *, gpus=(), engines=()) -> MonitorSnapshot:
    return MonitorSnapshot(
        t,
        tuple(gpus),
        None if gpus else "No NVIDIA driver found",
        RamReading(16 * GIB, 4 * GIB, 12 * GIB),
        12.5,
        tuple(engines),
    )


def vllm(usage: float | None = 0.5, preemptions: int | None = 0, loaded: bool = True, **kw) -> EngineReading:
    kv = KvReading(
        usage_fraction=usage,
        num_blocks=100,
        used_blocks=50,
        block_size_tokens=16,
        requests_running=3,
        requests_waiting=1,
        preemptions_total=preemptions,
        generation_tokens_per_s=250.0,
    )
    return EngineReading("vllm", "tiny @ 127.0.0.1:8000", loaded, (4242,), 3 * GIB, None, kv, None, **kw)


def test_snapshot_to_dict_is_the_cli_json_shape() -> None:
    data = json.loads(json.dumps(snap(1.0, gpus=[gpu()], engines=[vllm()]).to_dict()))
    assert set(data) >= {"gpus", "gpu_unavailable_reason", "ram", "backends"}
    assert data["ram"]["total_bytes"] == 16 * GIB and data["ram"]["used_bytes"] == 4 * GIB
    assert data["gpus"][0]["processes"][0] == {"pid": 42, "name": "python", "used_bytes": 9 * GIB}
    assert data["backends"][0]["kv"]["usage_fraction"] == 0.5
    assert data["gpu_unavailable_reason"] is None


def test_ring_series_drops_the_oldest() -> None:
    series = RingSeries(3)
    for i in range(5):
        series.append(float(i), i * 10.0)
    assert series.points() == [(2.0, 20.0), (3.0, 30.0), (4.0, 40.0)]
    assert series.points(since_s=3.5) == [(4.0, 40.0)]
    assert series.latest() == 40.0
    with pytest.raises(ValueError):
        RingSeries(0)


def test_history_stays_bounded_over_a_long_run() -> None:
    history = MonitorHistory(capacity=500)
    for i in range(20_000):
        history.add(snap(i * 0.5, engines=[vllm(usage=(i % 100) / 100)]))
    assert len(history) == 500
    assert all(len(s) == 500 for s in history.series.values())
    assert history.series["kv_usage_fraction"].points()[0][0] == (20_000 - 500) * 0.5


def test_csv_has_a_header_and_gaps_for_missing_values() -> None:
    history = MonitorHistory(capacity=10)
    history.add(snap(1.0))
    history.add(snap(1.5, gpus=[gpu()], engines=[vllm()]))
    rows = list(csv.reader(io.StringIO(history.to_csv())))
    assert rows[0] == ["time_s", *SERIES]
    first, second = (dict(zip(rows[0], r, strict=True)) for r in rows[1:])
    assert first["gpu_used_bytes"] == "" and first["kv_usage_fraction"] == ""
    assert second["gpu_used_bytes"] == str(10 * GIB) and second["kv_usage_fraction"] == "0.5"
    assert second["requests_running"] == "3"


def evaluate_alerts(
    previous: MonitorSnapshot | None, current: MonitorSnapshot, thresholds: AlertThresholds | None = None
) -> tuple[Alert, ...]:
    """The alerts for ``current`` from a fresh tracker that saw ``previous`` first (as the sampler feeds it)."""
    tracker = AlertTracker(thresholds)
    if previous is not None:
        tracker.update(previous)
    return tracker.update(current)


def test_no_alerts_in_calm_conditions() -> None:
    assert evaluate_alerts(snap(0, gpus=[gpu()], engines=[vllm()]), snap(1, gpus=[gpu()], engines=[vllm()])) == ()


def test_kv_alert_above_threshold() -> None:
    alerts = evaluate_alerts(None, snap(engines=[vllm(usage=0.93)]))
    assert [a.key for a in alerts] == ["kv:vllm"]
    assert "93%" in alerts[0].message and alerts[0].level == "warning"
    assert evaluate_alerts(None, snap(engines=[vllm(usage=0.93)]), AlertThresholds(kv_usage_fraction=0.95)) == ()


def test_preemptions_rising_alert_only_when_the_counter_grows() -> None:
    before, after = snap(0, engines=[vllm(preemptions=4)]), snap(1, engines=[vllm(preemptions=7)])
    (alert,) = evaluate_alerts(before, after)
    assert alert.key == "preemptions:vllm" and "3 request(s) preempted" in alert.message
    assert evaluate_alerts(after, after) == ()


def test_preemptions_alert_is_held_for_30_s_after_the_last_rise() -> None:
    tracker = AlertTracker()

    def keys_at(t: float, preemptions: int, engines=None) -> list[str]:
        return [a.key for a in tracker.update(snap(t, engines=engines or [vllm(preemptions=preemptions)]))]

    assert keys_at(0.0, 4) == []
    (alert,) = tracker.update(snap(0.5, engines=[vllm(preemptions=7)]))  # +3
    assert alert.key == "preemptions:vllm" and "3 request(s) preempted in the last 30 s" in alert.message
    assert keys_at(1.0, 7) == ["preemptions:vllm"]  # no new rise, still held (was gone at once before)
    assert keys_at(20.0, 9) == ["preemptions:vllm"]  # +2, counted with the first rise
    (alert,) = tracker.update(snap(30.6, engines=[vllm(preemptions=9)]))
    assert "2 request(s)" in alert.message  # the first rise left the window
    assert keys_at(50.0, 9) == ["preemptions:vllm"]  # 30 s after the last rise
    assert keys_at(50.6, 9) == []  # released
    assert keys_at(51.0, 12) == ["preemptions:vllm"]
    assert keys_at(51.5, 12, engines=[EngineReading("llamacpp", "m", True)]) == []  # the vLLM engine is gone
    kv_and_preempt = [a.key for a in tracker.update(snap(52.0, engines=[vllm(usage=0.95, preemptions=12)]))]
    assert kv_and_preempt == ["kv:vllm"]  # counting starts afresh when the engine returns


def test_vram_nearly_full_alert() -> None:
    (alert,) = evaluate_alerts(None, snap(gpus=[gpu(used=79 * GIB)]))
    assert alert.key == "vram:0" and "79.0 GiB of 80.0 GiB" in alert.message
    assert evaluate_alerts(None, snap(gpus=[gpu(used=None)])) == ()


def test_engine_holding_memory_after_unload() -> None:
    held = EngineReading("llamacpp", "llama.cpp worker", False, (99,), 200 * 1024**2, 2 * GIB)
    (alert,) = evaluate_alerts(None, snap(engines=[held]))
    assert alert.key == "leftover:llamacpp" and "pid 99" in alert.message and "2.0 GiB of VRAM" in alert.message
    freed = EngineReading("llamacpp", "llama.cpp worker", False, (99,), 200 * 1024**2, 300 * 1024**2)
    assert evaluate_alerts(None, snap(engines=[freed])) == ()
    no_gpu_big_rss = EngineReading("vllm", "vLLM", False, (7,), 3 * GIB, None)
    assert [a.key for a in evaluate_alerts(None, snap(engines=[no_gpu_big_rss]))] == ["leftover:vllm"]
    loaded = EngineReading("llamacpp", "m", True, (99,), 200, 5 * GIB)
    assert evaluate_alerts(None, snap(engines=[loaded])) == ()
