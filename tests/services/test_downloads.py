"""Downloads against the local Hub server with faults: drops, stalls, 5xx, wrong bytes, gated, a full disk."""

from __future__ import annotations

import hashlib
import subprocess
import threading
import time
from pathlib import Path

import pytest

from app.services.downloads.fetch import FetchPolicy
from app.services.downloads.hub import HubError, HubService
from app.services.downloads.job_runner import JobControl, run_job
from app.services.downloads.jobs import DONE, FAILED, PAUSED, QUEUED, STALLED, placement
from app.services.downloads.queue import DownloadQueue
from app.services.library.hf_cache import hf_hub_cache_dir
from tests.support.hf_server import VALID_TOKEN, FileFault, HubServer, Repo, random_bytes, use_hub

FAST = FetchPolicy(stall_s=1.0, max_retries=3, backoff_s=0.05)
BIG = "big-Q4_K_M.gguf"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    with HubServer() as server:
        use_hub(server, monkeypatch, tmp_path)
        server.add(Repo("org/Big-GGUF", {BIG: random_bytes(3_000_000, 1)}, tags=["gguf"]))
        server.add(
            Repo(
                "org/Tiny-HF",
                {"config.json": b'{"a": 1}', "tokenizer.json": b"{}", "model.safetensors": random_bytes(300_000, 2)},
                tags=["safetensors"],
            )
        )
        server.add(Repo("org/Gated", {"model-Q8_0.gguf": random_bytes(1000, 3)}, gated=True, tags=["gguf"]))
        yield server


def plan(repo_id: str, target_dir: str = "", **kwargs):
    service = HubService()
    return service.plan_download(service.repo_detail(repo_id, with_card=False), target_dir=target_dir, **kwargs)


def big_bytes(hub: HubServer) -> bytes:
    return hub.repos["org/Big-GGUF"].files[BIG]


def gets(hub: HubServer, path: str) -> list:
    return [e for e in hub.log if e.path == path and e.method == "GET"]


def test_download_lands_in_hf_cache_layout_and_huggingface_hub_finds_it(hub):
    from huggingface_hub import scan_cache_dir, try_to_load_from_cache

    job = plan("org/Big-GGUF", files=[BIG])
    run_job(job, JobControl(policy=FAST))
    assert job.state == DONE, job.error
    path = Path(job.local_path)
    assert path.is_symlink() and path.read_bytes() == big_bytes(hub)
    found = try_to_load_from_cache("org/Big-GGUF", BIG, cache_dir=hf_hub_cache_dir())  # refs/main, snapshot, blob
    assert found == str(path)
    repos = {r.repo_id: r for r in scan_cache_dir(hf_hub_cache_dir()).repos}
    assert repos["org/Big-GGUF"].size_on_disk == 3_000_000
    assert not list(hf_hub_cache_dir().rglob("*.incomplete"))


def test_multi_file_hf_folder_is_one_job_in_a_models_folder(hub, tmp_path):
    job = plan("org/Tiny-HF", target_dir=str(tmp_path / "models"))
    assert len(job.files) == 3
    run_job(job, JobControl(policy=FAST))
    assert job.state == DONE, job.error
    folder = tmp_path / "models" / "org" / "Tiny-HF"
    assert job.local_path == str(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert (folder / "model.safetensors").read_bytes() == hub.repos["org/Tiny-HF"].files["model.safetensors"]


def test_dropped_connection_resumes_with_a_range_request_and_refetches_nothing(hub):
    hub.faults[BIG] = FileFault(drop_after_bytes=1_000_000, drops=2)
    job = plan("org/Big-GGUF", files=[BIG])
    run_job(job, JobControl(policy=FAST))
    assert job.state == DONE, job.error
    log = gets(hub, BIG)
    assert [(e.status, e.start) for e in log] == [(200, 0), (206, 1_000_000), (206, 2_000_000)]
    assert hub.sent_bytes(BIG) == 3_000_000  # not one byte fetched twice
    assert Path(job.local_path).read_bytes() == big_bytes(hub)


def test_server_errors_are_retried_with_backoff(hub):
    hub.faults[BIG] = FileFault(errors_5xx=2)
    job = plan("org/Big-GGUF", files=[BIG])
    run_job(job, JobControl(policy=FAST))
    assert job.state == DONE, job.error
    assert [e.status for e in gets(hub, BIG)] == [503, 503, 200]


def test_persistent_server_errors_fail_with_the_partial_kept_and_a_retry_hint(hub):
    hub.faults[BIG] = FileFault(drop_after_bytes=500_000, errors_5xx=0)
    job = plan("org/Big-GGUF", files=[BIG])
    run_job(job, JobControl(policy=FAST))
    assert job.state == DONE  # one drop then success
    hub.faults["model.safetensors"] = FileFault(errors_5xx=10)
    job = plan("org/Tiny-HF")
    run_job(job, JobControl(policy=FetchPolicy(stall_s=1, max_retries=2, backoff_s=0.01)))
    assert job.state == FAILED and job.error_kind == "network"
    assert "HTTP 503" in job.error and "gave up after 2 retries" in job.error and "retry to continue" in job.error


def test_stall_is_shown_as_stalled_then_retried_from_the_partial(hub, tmp_path):
    hub.faults[BIG] = FileFault(stall_after_bytes=1_000_000, stall_s=3.0)
    manager = DownloadQueue(tmp_path / "q.json", policy=FetchPolicy(stall_s=1.0, backoff_s=0.05))
    job_id = manager.add(plan("org/Big-GGUF", files=[BIG]))
    manager.start()
    seen = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (view := manager.views()[0]).state != DONE:
        seen.add(view.state)
        if view.state == STALLED:
            assert view.speed_bytes_per_s == 0.0  # not a frozen speed
        time.sleep(0.05)
    manager.shutdown()
    assert manager.job(job_id).state == DONE
    assert STALLED in seen
    wait_for(lambda: len(gets(hub, BIG)) == 2)  # the stalled response is logged when its handler gives up
    assert sorted(e.start for e in gets(hub, BIG)) == [0, 1_000_000]


def test_wrong_bytes_fail_the_sha256_check_and_are_not_placed(hub):
    hub.faults[BIG] = FileFault(corrupt=True)
    job = plan("org/Big-GGUF", files=[BIG])
    run_job(job, JobControl(policy=FAST))
    assert job.state == FAILED and job.error_kind == "hash"
    assert "does not match" in job.error and "not placed" in job.error and "download it again" in job.error
    where = placement(job, job.files[0])
    assert not where.final_path.exists() and not where.partial_path.exists() and not where.link_path.exists()
    hub.faults.clear()  # the retry downloads it again, whole and right
    run_job(job, JobControl(policy=FAST))
    assert job.state == DONE and Path(job.local_path).read_bytes() == big_bytes(hub)


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("hf_wrongtokenwrongtokenwrong", 403)])
def test_gated_repo_says_accept_the_license_and_set_a_token(hub, token, status):
    job = plan("org/Gated", files=["model-Q8_0.gguf"])
    run_job(job, JobControl(token=token, policy=FAST))
    assert job.state == FAILED and job.error_kind == "auth"
    assert f"HTTP {status}" in job.error and "accept" in job.error and "token" in job.error
    assert token is None or token not in job.error


def test_gated_repo_with_a_valid_token_downloads(hub):
    job = plan("org/Gated", files=["model-Q8_0.gguf"])
    run_job(job, JobControl(token=VALID_TOKEN, policy=FAST))
    assert job.state == DONE, job.error


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small-disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {result.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_free_space_is_checked_before_starting(hub, small_disk):
    job = plan("org/Big-GGUF", files=[BIG], target_dir=str(small_disk))
    run_job(job, JobControl(policy=FAST))
    assert job.state == FAILED and job.error_kind == "disk"
    assert "Not enough free disk space" in job.error and "3.00 GB" not in job.error
    assert gets(hub, BIG) == []  # nothing was fetched


def test_disk_full_mid_file_keeps_the_partial_and_resumes_after_space_is_freed(hub, small_disk):
    hub.repos["org/Big-GGUF"].files[BIG] = data = random_bytes(1_500_000, 9)
    hub.faults[BIG] = FileFault(stall_after_bytes=600_000, stall_s=0.5)
    job = plan("org/Big-GGUF", files=[BIG], target_dir=str(small_disk))
    partial = placement(job, job.files[0]).partial_path
    filler = small_disk / "filler"

    def fill_when_half_done() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not partial.exists() or partial.stat().st_size < 600_000):
            time.sleep(0.01)
        with filler.open("wb") as f:  # another program takes the rest of the disk
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass

    filler_thread = threading.Thread(target=fill_when_half_done)
    filler_thread.start()
    run_job(job, JobControl(policy=FAST))
    filler_thread.join()
    assert job.state == FAILED and job.error_kind == "disk", job.error
    assert "disk is full" in job.error and "partial file is kept" in job.error
    kept = partial.stat().st_size
    assert kept >= 600_000
    filler.unlink()
    run_job(job, JobControl(policy=FAST))
    assert job.state == DONE, job.error
    assert Path(job.local_path).read_bytes() == data
    assert gets(hub, BIG)[-1].start == kept  # the retry fetched only the rest


def test_queue_survives_a_restart_and_continues_from_the_partial(hub, tmp_path):
    hub.throttle_bytes_per_s = 2_000_000
    store = tmp_path / "downloads.json"
    first = DownloadQueue(store, policy=FAST)
    job_id = first.add(plan("org/Big-GGUF", files=[BIG]))
    first.start()
    deadline = time.monotonic() + 60
    while first.views()[0].done_bytes < 500_000 and time.monotonic() < deadline:
        time.sleep(0.02)
    first.shutdown()
    assert first.job(job_id).state == QUEUED
    partial_bytes = placement(first.job(job_id), first.job(job_id).files[0]).partial_path.stat().st_size
    assert 0 < partial_bytes < 3_000_000
    hub.throttle_bytes_per_s = None
    second = DownloadQueue(store, policy=FAST)
    assert [v.id for v in second.views()] == [job_id] and second.views()[0].state == QUEUED
    second.start()
    wait_for(lambda: second.views()[0].state == DONE)
    second.shutdown()
    wait_for(lambda: len(gets(hub, BIG)) == 2)  # the stopped response is logged when its handler gives up
    assert max(e.start for e in gets(hub, BIG)) == partial_bytes
    assert hub.sent_bytes(BIG) - 3_000_000 < 256 * 1024  # at most what was in flight at the stop
    assert (
        hashlib.sha256(Path(second.job(job_id).local_path).read_bytes()).digest()
        == hashlib.sha256(big_bytes(hub)).digest()
    )


def test_pause_resume_cancel_and_remove(hub, tmp_path):
    hub.throttle_bytes_per_s = 2_000_000
    manager = DownloadQueue(tmp_path / "q.json", policy=FAST)
    done = []
    manager.completed.append(lambda job: done.append(job.id))
    job_id = manager.add(plan("org/Big-GGUF", files=[BIG]))
    manager.start()
    wait_for(lambda: manager.views()[0].done_bytes > 200_000)
    manager.pause(job_id)
    wait_for(lambda: not manager._runs)
    assert manager.views()[0].state == PAUSED
    paused_at = manager.views()[0].done_bytes
    assert paused_at > 0
    hub.throttle_bytes_per_s = None
    manager.resume(job_id)
    wait_for(lambda: manager.views()[0].state == DONE and done)  # the callback runs just after the state
    assert done == [job_id] and max(e.start for e in gets(hub, BIG)) == paused_at

    hub.throttle_bytes_per_s = 1_000_000
    other = manager.add(plan("org/Tiny-HF"))
    wait_for(lambda: any(v.id == other and v.done_bytes > 0 for v in manager.views()))
    tiny = manager.job(other)
    manager.cancel(other)
    wait_for(lambda: not manager._runs)
    assert [v.id for v in manager.views()] == [job_id]
    assert not any(placement(tiny, f).partial_path.exists() for f in tiny.files)
    manager.remove(job_id)
    assert manager.views() == [] and Path(manager.job(job_id) or "gone") == Path("gone")
    manager.shutdown()
    assert DownloadQueue(tmp_path / "q.json").views() == []


def test_a_broken_queue_file_is_set_aside(tmp_path):
    store = tmp_path / "q.json"
    store.write_text("{not json", encoding="utf-8")
    assert DownloadQueue(store).views() == []
    assert (tmp_path / "q.bad").read_text(encoding="utf-8") == "{not json"


def wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_token_never_reaches_the_log(hub, caplog, tmp_path):
    import logging

    with caplog.at_level(logging.DEBUG):
        job = plan("org/Gated", files=["model-Q8_0.gguf"])
        run_job(job, JobControl(token=VALID_TOKEN, policy=FAST))
        bad = plan("org/Gated", files=["model-Q8_0.gguf"], target_dir=str(tmp_path / "m"))
        run_job(bad, JobControl(token="hf_wrongtokenwrongtokenwrong", policy=FAST))
    assert job.state == DONE and bad.state == FAILED
    assert VALID_TOKEN not in caplog.text and "hf_wrongtoken" not in caplog.text + bad.error


def test_a_cdn_redirect_is_followed_and_a_drop_after_it_resumes_at_the_cdn(hub):
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    hub.redirect_lfs = True
    url = hf_hub_url("org/Big-GGUF", BIG, endpoint=hub.url)
    meta = get_hf_file_metadata(url)  # what huggingface_hub reads from the Hub's 302
    assert meta.size == 3_000_000 and meta.etag == hub.repos["org/Big-GGUF"].sibling(BIG)["lfs"]["sha256"]
    hub.faults[BIG] = FileFault(drop_after_bytes=1_200_000)
    job = plan("org/Big-GGUF", files=[BIG])
    run_job(job, JobControl(policy=FAST))
    assert job.state == DONE, job.error
    served = [(e.status, e.start) for e in gets(hub, BIG) if e.status != 302]
    assert served == [(200, 0), (206, 1_200_000)] and hub.sent_bytes(BIG) == 3_000_000


def test_a_second_downloader_of_the_same_file_is_told_to_wait(hub):
    hub.throttle_bytes_per_s = 1_000_000
    first, second = plan("org/Big-GGUF", files=[BIG]), plan("org/Big-GGUF", files=[BIG])
    ctl = JobControl(policy=FAST)
    worker = threading.Thread(target=run_job, args=(first, ctl))
    worker.start()
    wait_for(lambda: ctl.transfer.done_bytes > 100_000)
    run_job(second, JobControl(policy=FAST))
    assert second.state == FAILED and second.error_kind == "busy"
    assert "being downloaded by another window or command" in second.error
    hub.throttle_bytes_per_s = None
    worker.join(30)
    assert first.state == DONE and Path(first.local_path).read_bytes() == big_bytes(hub)
    assert not list(hf_hub_cache_dir().rglob("*.lock")) and not list(hf_hub_cache_dir().rglob("*.incomplete"))


def test_a_split_gguf_downloads_as_one_job_with_every_shard(hub, tmp_path):
    shards = {f"m-Q8_0-0000{i}-of-00003.gguf": random_bytes(20_000, i) for i in (1, 2, 3)}
    hub.add(Repo("org/Split-GGUF", shards, tags=["gguf"]))
    job = plan("org/Split-GGUF", target_dir=str(tmp_path / "m"), files=["m-Q8_0-00002-of-00003.gguf"])
    run_job(job, JobControl(policy=FAST))
    assert job.state == DONE, job.error
    folder = tmp_path / "m" / "org" / "Split-GGUF"
    assert job.local_path == str(folder) and {p.name: p.read_bytes() for p in folder.iterdir()} == shards


def test_offline_mode_is_named_not_reported_as_a_disk_or_unexpected_error(hub, monkeypatch):
    from huggingface_hub import constants

    job = plan("org/Big-GGUF", files=[BIG])
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets at import
    run_job(job, JobControl(policy=FAST))
    assert job.state == FAILED and job.error_kind == "network"
    assert job.error == "Hugging Face offline mode is on (HF_HUB_OFFLINE): unset it to download."
    with pytest.raises(HubError, match="offline mode is on"):
        HubService().repo_detail("org/Big-GGUF")


def test_the_view_never_waits_for_a_queue_file_write_and_the_newest_state_wins(tmp_path, monkeypatch):
    import json

    from app.services.downloads.jobs import DownloadJob, JobFile, JobStore

    manager = DownloadQueue(tmp_path / "q.json", max_active=0)  # nothing runs: only the queue file is written
    writing, release = threading.Event(), threading.Event()
    real_write = JobStore.write

    def slow_write(store, jobs):  # a slow disk: the first write waits for the test
        if not release.is_set():
            writing.set()
            release.wait(10)
        real_write(store, jobs)

    monkeypatch.setattr(JobStore, "write", slow_write)
    job = DownloadJob("org/x", "0" * 40, [JobFile("a.gguf", 10)])
    adder = threading.Thread(target=manager.add, args=(job,))
    adder.start()
    assert writing.wait(60)
    assert [v.state for v in manager.views()] == [QUEUED]  # while the file is being written
    pauser = threading.Thread(target=manager.pause, args=(job.id,))
    pauser.start()
    wait_for(lambda: manager.views()[0].state == PAUSED)  # the change does not wait for the write either
    assert adder.is_alive()  # the first write is still held by the test
    release.set()
    adder.join(60)
    pauser.join(60)
    saved = json.loads((tmp_path / "q.json").read_text(encoding="utf-8"))
    assert [j["state"] for j in saved["jobs"]] == [PAUSED]  # the older copy did not overwrite the newer one


def test_cancel_keeps_a_partial_file_another_downloader_is_writing(hub, tmp_path):
    from app.services.downloads.fetch import partial_lock

    manager = DownloadQueue(tmp_path / "q.json", max_active=0)
    first, second = plan("org/Big-GGUF", files=[BIG]), plan("org/Big-GGUF", files=[BIG])
    partial = placement(first, first.files[0]).partial_path
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes(b"p" * 1000)
    manager.add(first)
    with partial_lock(partial, BIG):  # a command downloading the same blob right now
        manager.cancel(first.id)
        assert partial.read_bytes() == b"p" * 1000 and manager.views() == []
    manager.add(second)
    manager.cancel(second.id)
    assert not partial.exists() and not list(partial.parent.glob("*.lock"))


def test_the_lock_file_is_held_by_one_downloader_at_a_time(tmp_path):
    from app.services.downloads.fetch import DownloadError, partial_lock

    partial = tmp_path / "blob.incomplete"
    inside, overlaps, acquired = [0], [0], [0]
    guard = threading.Lock()

    def contend() -> None:
        for _ in range(400):
            try:
                with partial_lock(partial, "blob"):
                    with guard:
                        inside[0] += 1
                        overlaps[0] += inside[0] > 1
                        acquired[0] += 1
                    time.sleep(0)
                    with guard:
                        inside[0] -= 1
            except DownloadError:
                pass  # busy: another one holds it

    threads = [threading.Thread(target=contend) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert acquired[0] > 100 and overlaps[0] == 0
    assert not (tmp_path / "blob.incomplete.lock").exists()


def test_a_file_that_changed_on_the_hub_mid_download_says_so(hub):
    job = plan("org/Big-GGUF", files=[BIG])
    partial = placement(job, job.files[0]).partial_path
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes(big_bytes(hub)[:1_000_000])  # an earlier, interrupted download
    hub.repos["org/Big-GGUF"].files[BIG] = random_bytes(500_000, 4)  # since replaced by a shorter file
    run_job(job, JobControl(policy=FAST))
    assert job.state == FAILED and job.error_kind == "changed"
    assert (
        job.error == f"{BIG}: the file changed on the Hub (HTTP 416 at byte 1,000,000): cancel and download it again."
    )
    assert [e.status for e in gets(hub, BIG)] == [416]  # not retried


def test_an_already_placed_copy_is_verified_without_a_download(hub, tmp_path):
    from app.services.downloads.jobs import DOWNLOADING, VERIFYING

    folder = str(tmp_path / "models")
    job = plan("org/Big-GGUF", files=[BIG], target_dir=folder)
    final = placement(job, job.files[0]).final_path
    final.parent.mkdir(parents=True)
    final.write_bytes(big_bytes(hub))  # downloaded before, by another job
    states: list[str] = []
    run_job(job, JobControl(policy=FAST, on_change=lambda: states.append(job.state)))
    assert job.state == DONE and gets(hub, BIG) == []
    assert states[:2] == [DOWNLOADING, VERIFYING]  # hashing it shows "Verifying", not a stalled download
    other = plan("org/Big-GGUF", files=[BIG], target_dir=str(tmp_path / "other"))
    wrong = placement(other, other.files[0]).final_path
    wrong.parent.mkdir(parents=True)
    wrong.write_bytes(random_bytes(3_000_000, 5))  # the right size, other bytes: downloaded again
    states.clear()
    run_job(other, JobControl(policy=FAST, on_change=lambda: states.append(other.state)))
    assert other.state == DONE and wrong.read_bytes() == big_bytes(hub)
    assert states[:3] == [DOWNLOADING, VERIFYING, DOWNLOADING]


def test_a_queue_file_that_cannot_be_set_aside_gives_an_empty_queue(tmp_path, caplog):
    store = tmp_path / ("q" * 250 + ".json")  # 255 characters: "<name>.bad.1" would be too long a name
    store.write_text("{not json", encoding="utf-8")
    bad = tmp_path / ("q" * 250 + ".bad")
    bad.mkdir()
    (bad / "keep").write_text("x")  # a non-empty folder where the broken file would go
    manager = DownloadQueue(store)
    assert manager.views() == []
    assert "cannot read the download queue" in caplog.text and "nor move it aside" in caplog.text
    assert (bad / "keep").read_text() == "x"


def test_successive_broken_queue_files_are_all_kept(tmp_path):
    store = tmp_path / "downloads.json"
    contents = ["{not json", "[" * 100_000 + "]" * 100_000, '{"jobs": 7}']
    for content in contents:
        store.write_text(content, encoding="utf-8")
        assert DownloadQueue(store).views() == []
        assert not store.exists()
    kept = [tmp_path / "downloads.bad", tmp_path / "downloads.bad.1", tmp_path / "downloads.bad.2"]
    assert [p.read_text(encoding="utf-8") for p in kept] == contents  # the first is never overwritten


@pytest.mark.parametrize(
    "jobs",
    [
        '[{"repo_id": "org/x", "commit": "%s", "files": [{"path": "a.gguf", "size_bytes": "10"}]}]' % ("0" * 40),
        '[{"repo_id": "org/x", "commit": "%s", "files": []}]' % ("0" * 40),
        '[{"repo_id": ["org/x"], "commit": "%s", "files": [{"path": "a.gguf", "size_bytes": 1}]}]' % ("0" * 40),
        '[{"repo_id": "org/x", "commit": "c", "files": [{"path": "a", "size_bytes": 1}], "state": "exploded"}]',
        '[{"repo_id": "org/x", "commit": "c", "files": [{"path": "a", "size_bytes": 1}], "extra": 1}]',
        "[7]",
        '{"nested": %s}' % ("[" * 100_000 + "]" * 100_000),
    ],
)
def test_a_queue_with_a_field_of_the_wrong_type_or_nested_json_is_set_aside(tmp_path, jobs):
    store = tmp_path / "q.json"
    text = '{"version": 1, "jobs": ' + jobs + "}"
    store.write_text(text, encoding="utf-8")
    manager = DownloadQueue(store)
    assert manager.views() == []  # and the view, which sums sizes, does not fail
    assert (tmp_path / "q.bad").read_text(encoding="utf-8") == text
