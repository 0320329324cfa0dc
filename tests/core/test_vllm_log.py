"""vLLM log reading: start-up phases on captured real logs (vLLM 0.32 CPU), crash causes on real crash tails.

The files in tests/data were captured from the real server on the tiny model (``vllm_startup.log`` with
``--enforce-eager``, ``vllm_startup_compile.log`` without) and from real failed starts (``vllm_crash_*.log``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.vllm.log import (
    CrashCause,
    Phase,
    StartupTracker,
    classify_crash,
    phase_of,
)

DATA = Path(__file__).resolve().parents[1] / "data"


def log_lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


def track(name: str) -> StartupTracker:
    tracker = StartupTracker()
    tracker.feed_all((float(number), line) for number, line in enumerate(log_lines(name)))
    return tracker


def test_eager_start_up_phases_in_order():
    tracker = track("vllm_startup.log")
    assert [event.phase for event in tracker.events] == [
        Phase.STARTING,
        Phase.LOADING_WEIGHTS,
        Phase.KV_CACHE,
        Phase.READY,
    ]
    times = [event.at_s for event in tracker.events]
    assert times == sorted(times) and times[0] == 0.0
    assert "Starting to load model" in tracker.events[1].line
    assert "Application startup complete" in tracker.events[-1].line
    assert tracker.current is Phase.READY


def test_compiled_start_up_shows_the_compile_phase():
    tracker = track("vllm_startup_compile.log")
    phases = [event.phase for event in tracker.events]
    assert phases == [Phase.STARTING, Phase.LOADING_WEIGHTS, Phase.COMPILING, Phase.KV_CACHE, Phase.READY]
    assert "Warming up model for the compilation" in tracker.events[2].line
    assert tracker.facts.engine_init_s == pytest.approx(24.80)


def test_facts_from_the_start_up_log():
    facts = track("vllm_startup.log").facts
    assert facts.version == "0.32.0"
    assert facts.kv_cache_tokens == 1_048_576
    assert facts.max_concurrency == pytest.approx(2048.0)
    assert facts.engine_init_s == pytest.approx(2.96)
    assert facts.weights_load_s == pytest.approx(0.0)


def test_enforce_eager_warning_is_not_a_compile_phase():
    line = (
        "(APIServer pid=1) WARNING 11-29 18:21:08 [vllm.py:1703] Enforce eager set, disabling torch.compile, CUDAGraphs"
    )
    assert phase_of(line) is None


@pytest.mark.parametrize(
    ("line", "phase"),
    [
        ("INFO 05-01 [gpu_model_runner.py:1843] Model loading took 1.1 GiB and 3.2 seconds", Phase.LOADING_WEIGHTS),
        ("INFO 05-01 [kv_cache_utils.py:634] GPU KV cache size: 312,672 tokens", Phase.KV_CACHE),
        ("INFO 05-01 [executor_base.py:112] # cuda blocks: 2000, # CPU blocks: 512", Phase.KV_CACHE),
        ("INFO 05-01 [backends.py:135] Dynamo bytecode transform time: 4.1 s", Phase.COMPILING),
        ("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67", Phase.COMPILING),
        ("INFO:     Uvicorn running on http://127.0.0.1:8000 (Press CTRL+C to quit)", Phase.READY),
        ("INFO 05-01 [api_server.py:1043] vLLM API server version 0.9.2", Phase.STARTING),
        ('INFO:     127.0.0.1:43224 - "GET /health HTTP/1.1" 200 OK', None),
    ],
)
def test_gpu_and_older_wordings(line, phase):
    assert phase_of(line) is phase


def test_older_gpu_facts():
    tracker = StartupTracker()
    tracker.feed("INFO 01-02 [api_server.py:1] vLLM API server version 0.6.6.post1", 0.0)
    tracker.feed("INFO 01-02 [worker.py:1] Model loading took 14.99 GiB and 10.68 seconds", 1.0)
    tracker.feed("INFO 01-02 [executor_base.py:1] # GPU blocks: 27000, # CPU blocks: 2048", 2.0)
    assert tracker.facts.version == "0.6.6.post1"
    assert tracker.facts.weights_load_s == pytest.approx(10.68)
    assert tracker.facts.num_gpu_blocks == 27000


def test_mark_records_a_phase_once():
    tracker = StartupTracker()
    assert tracker.feed("anything at all", 0.5).phase is Phase.STARTING
    assert tracker.mark(Phase.READY, 3.0, "GET /health 200") is not None
    assert tracker.mark(Phase.READY, 4.0) is None
    assert tracker.seen == {Phase.STARTING: 0.5, Phase.READY: 3.0}


# --- crashes (real tails) -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cause", "evidence"),
    [
        ("vllm_crash_noconf.log", CrashCause.MODEL_NOT_FOUND, "Invalid repository ID or local directory"),
        ("vllm_crash_nofolder.log", CrashCause.MODEL_NOT_FOUND, "Repo id must be in the form"),
        ("vllm_crash_badarch.log", CrashCause.UNSUPPORTED_ARCHITECTURE, "does not recognize this architecture"),
        ("vllm_crash_notok.log", CrashCause.MISSING_TOKENIZER, "Couldn't instantiate the backend tokenizer"),
        ("vllm_crash_oom.log", CrashCause.OUT_OF_MEMORY, "less than requested memory for kv"),
        ("vllm_crash_portinuse.log", CrashCause.PORT_IN_USE, "Address already in use"),
        ("vllm_crash_enginekill.log", CrashCause.ENGINE_DIED, "EngineDeadError"),
    ],
)
def test_real_crash_tails_are_classified(name, cause, evidence):
    diagnosis = classify_crash(log_lines(name)[-300:], exit_code=1)
    assert diagnosis.cause is cause
    assert evidence in diagnosis.evidence
    assert not diagnosis.evidence.startswith("(")  # vLLM's "(EngineCore pid=…) ERROR …" prefix is dropped


def test_the_oom_root_cause_far_above_the_end_wins_over_engine_died():
    lines = log_lines("vllm_crash_oom.log")
    assert "Engine core initialization failed" in "\n".join(lines[-10:])
    assert classify_crash(lines).cause is CrashCause.OUT_OF_MEMORY


@pytest.mark.parametrize(
    ("tail", "cause"),
    [
        (["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"], CrashCause.OUT_OF_MEMORY),
        (
            [
                "ValueError: To serve at least one request with the models's max seq len (32768), (4.50 GiB KV "
                "cache is needed, which is larger than the available KV cache memory (3.58 GiB)."
            ],
            CrashCause.OUT_OF_MEMORY,
        ),
        (
            ["ValueError: Model architectures ['FooForCausalLM'] are not supported for now."],
            CrashCause.UNSUPPORTED_ARCHITECTURE,
        ),
        (["RuntimeError: Unsupported CPU attention configuration: head_dim=16"], CrashCause.UNSUPPORTED_ARCHITECTURE),
        (["OSError: Can't load tokenizer for '/models/x'."], CrashCause.MISSING_TOKENIZER),
        (["ERROR: [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000)"], CrashCause.PORT_IN_USE),
        (
            ["ERROR [core_client.py] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client."],
            CrashCause.ENGINE_DIED,
        ),
    ],
)
def test_crafted_tails(tail, cause):
    noise = ["(APIServer pid=9) WARNING 11-29 [system_utils.py:255] Found ulimit of 20000 … `OSError: [Errno 24]`"]
    diagnosis = classify_crash(noise + tail)
    assert diagnosis.cause is cause
    assert diagnosis.message.endswith(".") and len(diagnosis.message) > 40  # says what to do


def test_unknown_failure_quotes_the_last_error_line():
    tail = [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "KeyError: 'rope_scaling'",
        "/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: leaked semaphore",
    ]
    diagnosis = classify_crash(tail, exit_code=1)
    assert diagnosis.cause is CrashCause.OTHER
    assert diagnosis.evidence == "KeyError: 'rope_scaling'"
    assert diagnosis.message == "vLLM stopped (exit code 1): KeyError: 'rope_scaling'. See the server log for details."


def test_the_harmless_ulimit_warning_is_not_a_crash_cause():
    line = (
        "(APIServer pid=1) WARNING 11-29 18:21:02 [system_utils.py:255] Found ulimit of 20000 and failed to "
        "automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors "
        "like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n"
    )
    assert classify_crash([line, "something went wrong"]).cause is CrashCause.OTHER
    assert classify_crash([]).message == "vLLM stopped. See the server log for details."


@pytest.mark.parametrize("name", ["vllm_startup.log", "vllm_startup_compile.log"])
def test_a_healthy_start_up_log_names_no_specific_cause(name):
    """A crash while running is classified over a tail that may still hold the whole start-up log."""
    lines = [line for line in log_lines(name) if "[shutdown]" not in line and "EngineDead" not in line]
    lines = lines[: next(i for i, line in enumerate(lines) if "Application startup complete" in line) + 1]
    assert classify_crash(lines).cause is CrashCause.OTHER
