"""A Hub mirror (any HF_ENDPOINT) that lies: traversal file names and commit ids, NUL, absurd sizes, nested JSON.

The real huggingface_hub-based downloader and the ``download`` command run against tests/support/hf_server.py playing
that mirror, in a models folder (``--dir``) and in the HF cache. A canary file where each hostile path would land
must stay byte-identical (and not become a link); the legitimate names still download.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import hub as commands_hub
from app.core.remote_paths import RemotePathError
from app.services.downloads.fetch import FetchPolicy
from app.services.downloads.hub import HubError, HubService
from app.services.downloads.job_runner import JobControl, run_job
from app.services.downloads.jobs import DONE, FAILED, DownloadJob, JobFile, job_root
from app.services.downloads.queue import DownloadQueue
from app.services.library.hf_cache import hf_hub_cache_dir
from tests.support.hf_server import HubServer, Repo, random_bytes, use_hub

FAST = FetchPolicy(stall_s=1.0, max_retries=2, backoff_s=0.05)
CANARY = b"precious bytes the mirror must never touch\n"
VICTIM_SHA = "../../../../victim"
DEEP = 100_000  # nesting levels: far past json's recursion limit
PR_COMMIT = "1" * 40
EVIL = random_bytes(500, 4)  # every hostile file's bytes; the mirror serves them for any path it is asked

# repository id -> the hostile file name it lists (the file exists on the server, so a fetch would succeed)
TRAVERSAL = {
    "evil/escape": "../../../../escape-Q4_K_M.gguf",
    "evil/sub-escape": "sub/../../../x-Q4_K_M.gguf",
    "evil/backslash": "..\\..\\..\\..\\back-Q4_K_M.gguf",
}
GOOD_FILES = {
    "sub/dir/x-Q4_K_M.gguf": random_bytes(3000, 1),
    "modèle-ünïcode-Q8_0.gguf": random_bytes(2000, 2),
    "模型-F16.gguf": random_bytes(1000, 3),
}


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.fixture
def mirror(monkeypatch, tmp_path):
    with HubServer() as server:
        use_hub(server, monkeypatch, tmp_path)
        server.catch_all = EVIL  # so a download would get its bytes even where the client normalizes '..' away
        for repo_id, name in TRAVERSAL.items():
            server.add(Repo(repo_id, {name: EVIL}, tags=["gguf"]))
        server.add(Repo("evil/absolute", {str(tmp_path / "abs" / "abs-Q4_K_M.gguf"): EVIL}, tags=["gguf"]))
        server.add(Repo("evil/nul", {"x\0-Q4_K_M.gguf": EVIL}, tags=["gguf"]))
        server.add(Repo("evil/victim", {"existing.txt": EVIL}, info_extra={"sha": VICTIM_SHA}))
        for repo_id, size in (("evil/huge", 10**30), ("evil/negative", -1), ("evil/text-size", "big")):
            extra = {"x-Q4_K_M.gguf": {"size": size, "lfs": {"size": size, "sha256": "a" * 64, "pointerSize": 1}}}
            server.add(Repo(repo_id, {"x-Q4_K_M.gguf": b"s" * 100}, sibling_extra=extra))
        blob_extra = {"x-Q4_K_M.gguf": {"lfs": None, "blobId": "../../../../blob-victim"}}
        server.add(Repo("evil/blob", {"x-Q4_K_M.gguf": b"b" * 100}, sibling_extra=blob_extra))
        deep = b'{"id": "evil/deep", "sha": "' + b"0" * 40 + b'", "cardData": ' + nested(DEEP) + b"}"
        server.add(Repo("evil/deep", {"x-Q4_K_M.gguf": b"d"}, raw_info=deep))
        server.add(Repo("good/repo", dict(GOOD_FILES), tags=["gguf"]))
        yield server


def canary_at(path: Path) -> Path:
    """A file where a hostile path would land (``..`` collapsed as the OS would)."""
    landing = Path(os.path.normpath(path))
    landing.parent.mkdir(parents=True, exist_ok=True)
    landing.write_bytes(CANARY)
    return landing


def assert_untouched(canary: Path) -> None:
    assert not canary.is_symlink() and canary.read_bytes() == CANARY
    assert not canary.with_name(canary.name + ".incomplete").exists()


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="llm-workstation")
    commands_hub.add_parser(parser.add_subparsers(dest="verb"))
    code = commands_hub.run(parser.parse_args(list(argv)))
    out = capsys.readouterr()
    return code, out.out, out.err


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m app ...`` in a child process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "app", *argv], capture_output=True, text=True, timeout=120)


def landing_root(tmp_path: Path, repo_id: str, mode: str, commit: str) -> Path:
    if mode == "dir":
        return tmp_path / "models" / Path(*repo_id.split("/"))
    return hf_hub_cache_dir() / ("models--" + repo_id.replace("/", "--")) / "snapshots" / commit


def mode_args(tmp_path: Path, mode: str) -> list[str]:
    return ["--dir", str(tmp_path / "models")] if mode == "dir" else []


def one_line_failure(code: int, err: str, want_code: int, *needles: str) -> None:
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert code == want_code and last.startswith("llm-workstation: "), err
    for needle in needles:
        assert needle in last, last


# --- file names and commit ids that would leave their folder --------------------------------------------------


@pytest.mark.parametrize("mode", ["dir", "cache"])
@pytest.mark.parametrize("repo_id", sorted(TRAVERSAL))
def test_a_traversal_file_name_is_refused_and_the_canary_stays(capsys, mirror, tmp_path, mode, repo_id):
    name = TRAVERSAL[repo_id]
    repo = mirror.repos[repo_id]
    canary = canary_at(landing_root(tmp_path, repo_id, mode, repo.commit) / name.replace("\\", "/"))
    code, out, err = cli(capsys, "download", repo_id, "--quant", "Q4_K_M", *mode_args(tmp_path, mode))
    one_line_failure(code, err, 1, f"the server gave a file named {name!r}", "is HF_ENDPOINT a mirror you trust?")
    assert out == ""
    assert_untouched(canary)
    assert [e for e in mirror.log if e.method == "GET"] == []  # refused before any byte was asked for


@pytest.mark.parametrize("mode", ["dir", "cache"])
def test_the_command_refuses_a_traversal_name_in_a_child_process(mirror, tmp_path, mode):
    name = TRAVERSAL["evil/escape"]
    canary = canary_at(landing_root(tmp_path, "evil/escape", mode, mirror.repos["evil/escape"].commit) / name)
    result = run_cli("download", "evil/escape", name, *mode_args(tmp_path, mode))
    one_line_failure(result.returncode, result.stderr, 1, "would be written outside the download folder")
    assert_untouched(canary)


@pytest.mark.parametrize("mode", ["dir", "cache"])
def test_an_absolute_file_name_is_refused(capsys, mirror, tmp_path, mode):
    name = next(iter(mirror.repos["evil/absolute"].files))
    canary = canary_at(Path(name))
    code, _, err = cli(capsys, "download", "evil/absolute", name, *mode_args(tmp_path, mode))
    one_line_failure(code, err, 1, "is an absolute path")
    assert_untouched(canary)
    assert not (tmp_path / "models").exists() or not list((tmp_path / "models").rglob("*.gguf*"))


@pytest.mark.parametrize("mode", ["dir", "cache"])
def test_a_nul_byte_in_a_file_name_is_a_clear_error(capsys, mirror, tmp_path, mode):
    code, _, err = cli(capsys, "download", "evil/nul", "--quant", "Q4_K_M", *mode_args(tmp_path, mode))
    one_line_failure(code, err, 1, "'x\\x00-Q4_K_M.gguf'", "contains a NUL byte")
    assert "embedded null byte" not in err


def test_a_traversal_commit_id_never_replaces_a_file_outside_the_cache(mirror, tmp_path):
    repo_dir = hf_hub_cache_dir() / "models--evil--victim"
    canary = canary_at(repo_dir / "snapshots" / VICTIM_SHA / "existing.txt")
    result = run_cli("download", "evil/victim", "existing.txt")  # the HF cache: the commit names a folder
    one_line_failure(result.returncode, result.stderr, 1, f"the commit id {VICTIM_SHA!r}", "40 lowercase hexadecimal")
    assert_untouched(canary)
    assert not repo_dir.exists()
    with pytest.raises(HubError, match="the commit id") as caught:
        HubService().repo_detail("evil/victim")
    assert caught.value.reason == "bad_answer"


def test_a_traversal_commit_id_is_refused_in_a_models_folder_too(capsys, mirror, tmp_path):
    code, _, err = cli(capsys, "download", "evil/victim", "existing.txt", "--dir", str(tmp_path / "models"))
    one_line_failure(code, err, 1, "the commit id")
    assert not (tmp_path / "models").exists()


def test_a_traversal_blob_id_is_refused(capsys, mirror, tmp_path):
    code, _, err = cli(capsys, "download", "evil/blob", "x-Q4_K_M.gguf")
    one_line_failure(code, err, 1, "the blob id '../../../../blob-victim'")


@pytest.mark.parametrize(
    ("repo_id", "shown"), [("evil/huge", str(10**30)), ("evil/negative", "-1"), ("evil/text-size", "'big'")]
)
def test_absurd_sizes_are_refused(capsys, mirror, tmp_path, repo_id, shown):
    code, _, err = cli(capsys, "download", repo_id, "x-Q4_K_M.gguf", "--dir", str(tmp_path / "models"))
    one_line_failure(code, err, 1, f"the size of 'x-Q4_K_M.gguf' as {shown}")
    assert not (tmp_path / "models").exists()


def test_a_traversal_revision_given_on_the_command_line_is_bad_input(capsys, mirror):
    code, _, err = cli(capsys, "download", "good/repo", "模型-F16.gguf", "--revision", "../../../../ref-victim")
    one_line_failure(code, err, 2, "you gave the revision '../../../../ref-victim'")
    code, _, err = cli(capsys, "hub", "files", "../../etc")
    one_line_failure(code, err, 2, "you gave the repository id '../../etc'")


# --- JSON nested too deeply ---------------------------------------------------------------------------------


def test_deeply_nested_json_from_the_hub_is_a_clear_error(capsys, mirror):
    with pytest.raises(HubError, match="nested too deeply") as caught:
        HubService().repo_detail("evil/deep")
    assert caught.value.reason == "bad_answer"
    code, _, err = cli(capsys, "hub", "files", "evil/deep")
    one_line_failure(code, err, 1, "answered the request for evil/deep with JSON that is nested too deeply")
    mirror.raw_search = nested(DEEP)
    with pytest.raises(HubError, match="nested too deeply"):
        HubService().search("x")
    result = run_cli("hub", "search", "x")
    one_line_failure(result.returncode, result.stderr, 1, "is HF_ENDPOINT a mirror you trust?")


def test_malformed_and_misshapen_answers_are_clear_errors(mirror):
    mirror.raw_search = b"[{not json"
    with pytest.raises(HubError, match="JSON that is not valid") as caught:
        HubService().search("x")
    assert caught.value.reason == "bad_answer"
    mirror.repos["good/repo"].raw_info = json.dumps({"id": "good/repo", "siblings": [{"size": 1}]}).encode()
    with pytest.raises(HubError, match="unexpected shape") as caught:
        HubService().repo_detail("good/repo")  # a sibling without "rfilename"
    assert caught.value.reason == "bad_answer"


# --- defence in depth: jobs that did not come from a checked Hub answer ---------------------------------------


def wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def hand_made(tmp_path: Path, mode: str, **changes) -> DownloadJob:
    """A job as a hand-edited queue file could hold it (for good/repo, whose files exist on the server)."""
    data = GOOD_FILES["模型-F16.gguf"]
    job = DownloadJob("good/repo", "0" * 40, [JobFile("模型-F16.gguf", len(data))])
    job.target_dir = str(tmp_path / "models") if mode == "dir" else ""
    for key, value in changes.items():
        if key in ("path", "sha256", "blob_id"):
            setattr(job.files[0], key, value)
        else:
            setattr(job, key, value)
    return job


@pytest.mark.parametrize("mode", ["dir", "cache"])
@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"path": "../../../../escape-Q4_K_M.gguf"}, "a file named '../../../../escape-Q4_K_M.gguf'"),
        ({"path": "sub/../../../x.gguf"}, "would be written outside the download folder"),
        ({"path": "/etc/x"}, "is an absolute path"),
        ({"path": "a\\b.gguf"}, "contains a backslash"),
        ({"path": "x\0.gguf"}, "contains a NUL byte"),
        ({"commit": VICTIM_SHA}, "the commit id"),
        ({"repo_id": "../../../victim"}, "the repository id"),
        ({"sha256": "../../../../victim"}, "the sha256"),
        ({"blob_id": "../../../../victim"}, "the blob id"),
        ({"revision": "../../../../victim"}, "the revision"),
    ],
)
def test_run_job_refuses_unsafe_values_again(mirror, tmp_path, mode, change, needle):
    job = hand_made(tmp_path, mode, **change)
    run_job(job, JobControl(policy=FAST))
    assert job.state == FAILED and job.error_kind == "bad_input", job.error
    assert needle in job.error and "the download queue gave" in job.error
    assert [e for e in mirror.log if e.method == "GET"] == []
    assert not list(tmp_path.rglob("*.incomplete"))


def test_a_ref_outside_the_cache_is_never_written(mirror, tmp_path):
    repo_dir = hf_hub_cache_dir() / "models--good--repo"
    canary = canary_at(repo_dir / "refs" / "../../../../ref-victim")
    job = hand_made(tmp_path, "cache", revision="../../../../ref-victim")
    run_job(job, JobControl(policy=FAST))
    assert job.state == FAILED and "the revision '../../../../ref-victim'" in job.error
    assert_untouched(canary)


@pytest.mark.parametrize("mode", ["dir", "cache"])
def test_a_link_planted_in_the_target_folder_is_not_followed_out(mirror, tmp_path, mode):
    job = hand_made(tmp_path, mode, path="sub/x-Q4_K_M.gguf")
    mirror.repos["good/repo"].files["sub/x-Q4_K_M.gguf"] = b"server"
    outside = tmp_path / "outside"
    canary = canary_at(outside / "x-Q4_K_M.gguf")
    root = job_root(job)
    root.mkdir(parents=True)
    (root / "sub").symlink_to(outside, target_is_directory=True)  # a folder link that leads elsewhere
    run_job(job, JobControl(policy=FAST))
    assert job.state == FAILED and job.error_kind == "bad_input" and "leads outside" in job.error
    assert_untouched(canary)


def test_a_hand_edited_queue_keeps_the_job_failed_and_never_runs_it(mirror, tmp_path):
    name = TRAVERSAL["evil/escape"]
    job = hand_made(tmp_path, "dir", path=name)
    canary = canary_at(job_root(job) / name)
    store = tmp_path / "downloads.json"
    store.write_text(json.dumps({"version": 1, "jobs": [job.to_dict()]}), encoding="utf-8")
    manager = DownloadQueue(store, policy=FAST)
    [view] = manager.views()
    assert view.state == FAILED and f"a file named {name!r}" in view.error
    manager.start()
    manager.resume(job.id)  # Retry runs it, and it fails again without touching anything
    wait_for(lambda: manager.views()[0].state == FAILED and not manager._runs)
    assert f"a file named {name!r}" in manager.views()[0].error
    manager.cancel(job.id)
    manager.shutdown()
    assert manager.views() == [] and (job.id not in store.read_text(encoding="utf-8"))
    assert_untouched(canary)
    assert [e for e in mirror.log if e.method == "GET"] == []


def test_placement_raises_the_remote_path_error(tmp_path):
    from app.services.downloads.jobs import placement

    job = hand_made(tmp_path, "dir", path="../x.gguf")
    with pytest.raises(RemotePathError):
        placement(job, job.files[0])


# --- legitimate names still download ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(GOOD_FILES))
def test_legitimate_names_download_into_a_models_folder(capsys, mirror, tmp_path, name):
    code, out, err = cli(capsys, "download", "good/repo", name, "--dir", str(tmp_path / "models"))
    assert code == 0, err
    path = Path(out.strip())
    assert path == tmp_path / "models" / "good" / "repo" / Path(*name.split("/"))
    assert path.read_bytes() == GOOD_FILES[name]


def test_legitimate_names_and_a_pr_revision_download_into_the_cache(mirror, tmp_path):
    from huggingface_hub import try_to_load_from_cache

    mirror.repos["good/repo"].info_extra = {"sha": PR_COMMIT}  # what refs/pr/1 points at
    names = sorted(GOOD_FILES)
    result = run_cli("download", "good/repo", names[0], "--revision", "refs/pr/1")
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.strip())
    assert path.is_symlink() and path.read_bytes() == GOOD_FILES[names[0]]
    assert path == hf_hub_cache_dir() / "models--good--repo" / "snapshots" / PR_COMMIT / names[0]
    refs = hf_hub_cache_dir() / "models--good--repo" / "refs" / "refs" / "pr" / "1"
    assert refs.read_text(encoding="utf-8") == PR_COMMIT  # where huggingface_hub keeps it
    found = try_to_load_from_cache("good/repo", names[0], cache_dir=hf_hub_cache_dir(), revision="refs/pr/1")
    assert found == str(path)
    for name in names[1:]:
        job = HubService().plan_download(HubService().repo_detail("good/repo", with_card=False), files=[name])
        run_job(job, JobControl(policy=FAST))
        assert job.state == DONE and Path(job.local_path).read_bytes() == GOOD_FILES[name], job.error


# --- Ollama's store: manifests are read as data, never as paths out of the store ----------------------------


def ollama_manifest(store: Path, relative: str, text: str) -> Path:
    path = store / "manifests" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def model_layer(digest: object) -> str:
    return json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": digest}]})


def test_hostile_ollama_manifests_are_listed_with_their_error(tmp_path):
    from app.services.library.files import WalkReport
    from app.services.library.ollama_store import scan_ollama_store

    store = tmp_path / "ollama"
    hex64 = "ab" * 32
    (store / "blobs").mkdir(parents=True)
    (store / "blobs" / f"sha256-{hex64}").write_bytes(b"GGUF")
    (tmp_path / "passwd").write_text("secret")
    library = "registry.ollama.ai/library"
    ollama_manifest(store, f"{library}/good/latest", model_layer(f"sha256:{hex64}"))
    ollama_manifest(store, f"{library}/deep/latest", '{"layers": ' + "[" * DEEP + "]" * DEEP + "}")
    ollama_manifest(store, f"{library}/huge/latest", '{"layers": [], "pad": "' + "x" * (2 << 20) + '"}')
    ollama_manifest(store, f"{library}/escape/latest", model_layer("sha256:../../../passwd"))
    ollama_manifest(store, f"{library}/suffix/latest", model_layer(f"sha256:{hex64}/../../../../passwd"))
    ollama_manifest(store, f"{library}/number/latest", model_layer(7))
    ollama_manifest(store, f"{library}/a..b/latest", model_layer(f"sha256:{hex64}"))
    ollama_manifest(store, f"{library}/ctrl/la\ttest", model_layer(f"sha256:{hex64}"))
    models = {m.name: m for m in scan_ollama_store(store, WalkReport())}
    assert models["good:latest"].error is None and models["good:latest"].blob_path == store / "blobs" / (
        f"sha256-{hex64}"
    )
    assert "nested too deeply" in models["deep:latest"].error and "unreadable" in models["deep:latest"].error
    assert "larger than 1 MiB" in models["huge:latest"].error
    for name, shown in (("escape", "'sha256:../../../passwd'"), ("suffix", "/../../../../passwd"), ("number", "7")):
        model = models[f"{name}:latest"]
        assert model.blob_path is None and "bad model digest" in model.error and shown in model.error
    odd = {name: m for name, m in models.items() if m.blob_path is None and "the model name part" in (m.error or "")}
    assert len(odd) == 2 and any("'a..b'" in m.error for m in odd.values())
    assert any("'la\\ttest'" in m.error for m in odd.values())
    assert (tmp_path / "passwd").read_text() == "secret"
