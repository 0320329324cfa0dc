"""LogBuffer: bounded, redacting, thread-safe, with subscribers; install_logging is idempotent."""

from __future__ import annotations

import logging
import os
import stat
import threading

import pytest

from app.services.logbuffer import (
    LogBuffer,
    LogEntry,
    _RedactingFileHandler,
    install_logging,
    redact,
    uninstall_logging,
)

HF_TOKEN = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7"


@pytest.fixture
def clean_app_logger():
    yield logging.getLogger("app")
    uninstall_logging()
    logging.getLogger("app").setLevel(logging.NOTSET)


def test_keeps_only_the_newest_records(logger):
    buf = LogBuffer(capacity=10)
    logger.addHandler(buf)
    for i in range(25):
        logger.info("message %d", i)
    entries = buf.records()
    assert len(entries) == 10
    assert [e.message for e in entries] == [f"message {i}" for i in range(15, 25)]
    assert [e.seq for e in entries] == list(range(16, 26))


def test_default_capacity_is_5000():
    assert LogBuffer().capacity == 5000
    with pytest.raises(ValueError):
        LogBuffer(capacity=0)


def test_entry_fields_and_format(logger, buffer):
    logger.warning("disk %s is %d%% full", "/models", 93)
    (entry,) = buffer.records()
    assert (entry.level, entry.levelno, entry.logger) == ("WARNING", logging.WARNING, "app.tests.logbuffer")
    assert entry.message == "disk /models is 93% full"
    line = entry.format()
    assert "WARNING" in line and "app.tests.logbuffer: disk /models is 93% full" in line


def test_clear_empties_the_buffer(logger, buffer):
    logger.info("one")
    buffer.clear()
    assert buffer.records() == []
    logger.info("two")
    assert [e.message for e in buffer.records()] == ["two"]


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"downloading with token {HF_TOKEN}", HF_TOKEN),
        ("Authorization: Bearer eyJhbGciOi.abc-DEF_123", "eyJhbGciOi.abc-DEF_123"),
        ("GET /v1/models?api_key=sk-123456&x=1", "sk-123456"),
        ('{"api_key": "s3cr3t-value"}', "s3cr3t-value"),
        ("API-KEY: abcdef0123", "abcdef0123"),
    ],
)
def test_redact_removes_secrets(text, secret):
    cleaned = redact(text)
    assert secret not in cleaned
    assert "[REDACTED]" in cleaned


def test_redact_leaves_ordinary_text_alone():
    text = "loaded hf_model.gguf (hf_short) with 4096 tokens, bearer of good news"
    assert redact(text) == text


def test_secrets_never_reach_the_buffer(logger, buffer):
    logger.info("token=%s", HF_TOKEN)
    try:
        raise RuntimeError(f"request failed: Bearer {HF_TOKEN}")
    except RuntimeError:
        logger.exception("with api_key=topsecret123")
    text = "\n".join(e.message for e in buffer.records())
    assert HF_TOKEN not in text
    assert "topsecret123" not in text
    assert "RuntimeError" in text  # The traceback is kept, only the secret is gone.


def test_subscribers_get_each_new_record_until_unsubscribed(logger, buffer):
    seen: list[LogEntry] = []
    buffer.subscribe(seen.append)
    buffer.subscribe(seen.append)  # Subscribing twice does not double calls.
    assert buffer.subscriber_count() == 1
    logger.info("a")
    logger.debug("b")
    buffer.unsubscribe(seen.append)
    logger.info("c")
    assert [e.message for e in seen] == ["a", "b"]
    assert buffer.subscriber_count() == 0
    buffer.unsubscribe(seen.append)  # Unknown callbacks are ignored.


def test_subscriber_runs_on_the_logging_thread_and_failures_are_contained(logger, buffer):
    threads: list[str] = []

    def broken(entry: LogEntry) -> None:
        raise RuntimeError("subscriber bug")

    buffer.subscribe(broken)
    buffer.subscribe(lambda entry: threads.append(threading.current_thread().name))
    worker = threading.Thread(target=logger.info, args=("from worker",), name="log-worker")
    worker.start()
    worker.join()
    assert threads == ["log-worker"]
    assert [e.message for e in buffer.records()] == ["from worker"]


def test_logging_from_four_threads(logger, buffer):
    per_thread = 500
    received: list[int] = []
    buffer.subscribe(lambda entry: received.append(entry.seq))
    start = threading.Barrier(4)

    def work(n: int) -> None:
        start.wait()
        for i in range(per_thread):
            logger.info("thread %d line %d", n, i)
            if i % 50 == 0:
                buffer.records()  # Snapshots while others append must not fail.

    workers = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    entries = buffer.records()
    assert len(entries) == 4 * per_thread
    assert [e.seq for e in entries] == list(range(1, 4 * per_thread + 1))
    assert received == [e.seq for e in entries]
    for n in range(4):
        assert sum(e.message.startswith(f"thread {n} ") for e in entries) == per_thread


def test_install_logging_is_idempotent(clean_app_logger, tmp_path):
    log_file = tmp_path / "logs" / "app.log"
    first = install_logging("INFO", log_file)
    second = install_logging("DEBUG", log_file)
    app_logger = clean_app_logger
    assert first is second
    assert sum(isinstance(h, LogBuffer) for h in app_logger.handlers) == 1
    assert sum(isinstance(h, _RedactingFileHandler) for h in app_logger.handlers) == 1
    assert app_logger.level == logging.DEBUG

    logging.getLogger("app.tests.install").debug("token %s", HF_TOKEN)
    assert [e.message for e in first.records()][-1] == "token hf_[REDACTED]"
    for handler in app_logger.handlers:
        handler.flush()
    written = log_file.read_text(encoding="utf-8")
    assert "token hf_[REDACTED]" in written
    assert HF_TOKEN not in written
    assert written.count("token hf_") == 1  # One file handler, one line.


def test_install_logging_swaps_or_drops_the_file(clean_app_logger, tmp_path):
    install_logging("INFO", tmp_path / "a.log")
    install_logging("INFO", tmp_path / "b.log")
    files = [h for h in clean_app_logger.handlers if isinstance(h, _RedactingFileHandler)]
    assert [h.baseFilename for h in files] == [str((tmp_path / "b.log").resolve())]
    handler = files[0]
    assert (handler.maxBytes, handler.backupCount) == (1_000_000, 3)
    install_logging("WARNING")
    assert not any(isinstance(h, _RedactingFileHandler) for h in clean_app_logger.handlers)
    assert clean_app_logger.level == logging.WARNING


def test_install_logging_leaves_the_root_logger_alone(clean_app_logger):
    root_handlers = list(logging.getLogger().handlers)
    install_logging("INFO")
    assert logging.getLogger().handlers == root_handlers


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_the_log_file_and_its_backups_are_owner_only(clean_app_logger, tmp_path):
    previous = os.umask(0o022)  # most desktops: a plain open() would make the log 0644
    try:
        log_file = tmp_path / "app.log"
        log_file.write_text("from an earlier version\n")
        log_file.chmod(0o644)
        install_logging("INFO", log_file)
        (handler,) = [h for h in clean_app_logger.handlers if isinstance(h, _RedactingFileHandler)]
        handler.maxBytes = 200  # rotate after a few lines
        for n in range(20):
            logging.getLogger("app.tests.modes").info("line %d of the log, long enough to rotate soon", n)
        handler.flush()
    finally:
        os.umask(previous)
    assert (tmp_path / "app.log.3").exists()  # rotated three times
    written = [log_file, *(tmp_path / f"app.log.{n}" for n in (1, 2, 3))]
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in written} == {p.name: 0o600 for p in written}
    assert "line 19 of the log" in log_file.read_text(encoding="utf-8")
