"""HubService with the real huggingface_hub client against the local Hub server (tests/support/hf_server.py)."""

from __future__ import annotations

import pytest

from app.core.errors import ErrorKind
from app.core.gguf.header import GgufFileError
from app.services.downloads import hub as hub_module
from app.services.downloads.hub import HubError, HubService, resolve_token
from tests.support.hf_server import HubServer, Repo, random_bytes, use_hub


@pytest.fixture
def hub(monkeypatch, tmp_path):
    with HubServer() as server:
        use_hub(server, monkeypatch, tmp_path)
        server.add(
            Repo(
                "TheOrg/Tiny-GGUF",
                {
                    "tiny-Q4_K_M.gguf": random_bytes(3000, 1),
                    "tiny-Q8_0-00001-of-00002.gguf": random_bytes(4000, 2),
                    "tiny-Q8_0-00002-of-00002.gguf": random_bytes(1000, 3),
                    "mmproj-tiny-F16.gguf": random_bytes(500, 4),
                    "README.md": b"---\nlicense: mit\n---\n# Tiny\nA card.\n",
                },
                tags=["gguf", "license:mit"],
                downloads=10,
                likes=1,
                license="mit",
            )
        )
        server.add(
            Repo(
                "TheOrg/Tiny-HF",
                {
                    "config.json": b"{}",
                    "tokenizer.json": b"{}",
                    "model.safetensors": random_bytes(2000, 5),
                    "pytorch_model.bin": random_bytes(2000, 6),
                    "original/consolidated.pth": b"x",
                },
                tags=["safetensors"],
                downloads=50,
                likes=7,
                last_modified="2026-06-01T00:00:00.000Z",
            )
        )
        server.add(Repo("Other/Tiny-AWQ", {"model.safetensors": b"y" * 10}, tags=["safetensors", "awq"], downloads=5))
        server.add(Repo("Gated/Model", {"model.gguf": b"z" * 10}, gated=True, tags=["gguf"]))
        yield server


def test_search_filters_sorts_and_limits(hub):
    service = HubService()
    assert [r.id for r in service.search("tiny")] == ["TheOrg/Tiny-HF", "TheOrg/Tiny-GGUF", "Other/Tiny-AWQ"]
    assert [r.id for r in service.search("tiny", fmt="gguf")] == ["TheOrg/Tiny-GGUF"]
    assert [r.id for r in service.search("", fmt="awq")] == ["Other/Tiny-AWQ"]
    assert [r.id for r in service.search("tiny", sort="likes", limit=1)] == ["TheOrg/Tiny-HF"]
    recent = service.search("theorg", sort="recent")
    assert recent[0].id == "TheOrg/Tiny-HF" and recent[0].last_modified.startswith("2026-06-01")
    gated = service.search("gated")[0]
    assert gated.gated == "manual" and gated.to_dict()["id"] == "Gated/Model"


def test_search_rejects_unknown_filter_and_sort(hub):
    with pytest.raises(HubError, match="Unknown format filter 'onnx'"):
        HubService().search("x", fmt="onnx")
    with pytest.raises(HubError, match="Unknown sort"):
        HubService().search("x", sort="size")


def test_repo_detail_lists_sizes_hashes_license_card_and_groups_quants(hub):
    detail = HubService().repo_detail("TheOrg/Tiny-GGUF")
    assert detail.commit == hub.repos["TheOrg/Tiny-GGUF"].commit
    q4 = detail.file("tiny-Q4_K_M.gguf")
    assert q4 is not None and q4.size_bytes == 3000
    assert q4.sha256 == hub.repos["TheOrg/Tiny-GGUF"].sibling("tiny-Q4_K_M.gguf")["lfs"]["sha256"]
    assert detail.file("README.md").sha256 is None  # a small git file has no LFS hash
    assert detail.license == "mit" and detail.gated is False
    assert detail.card_text == "# Tiny\nA card."
    assert [(c.quant, c.size_bytes, c.is_projector) for c in detail.candidates] == [
        ("Q4_K_M", 3000, False),
        ("Q8_0", 5000, False),
        ("F16", 500, True),
    ]
    assert detail.to_dict()["gguf"][1]["files"] == ["tiny-Q8_0-00001-of-00002.gguf", "tiny-Q8_0-00002-of-00002.gguf"]


def test_plan_download_by_quant_shard_file_and_hf_folder(hub):
    service = HubService()
    gguf = service.repo_detail("TheOrg/Tiny-GGUF", with_card=False)
    assert [f.path for f in service.plan_download(gguf, quant="q8_0").files] == [
        "tiny-Q8_0-00001-of-00002.gguf",
        "tiny-Q8_0-00002-of-00002.gguf",
        "mmproj-tiny-F16.gguf",  # the repository's vision projector comes with the model
    ]
    # asking for one shard brings the whole split file (and the projector)
    job = service.plan_download(gguf, files=["tiny-Q8_0-00002-of-00002.gguf"], target_dir="/models")
    assert len(job.files) == 3 and job.target_dir == "/models" and job.commit == gguf.commit
    single = service.plan_download(gguf, files=["tiny-Q4_K_M.gguf"]).files[0]
    assert single.sha256 == gguf.file("tiny-Q4_K_M.gguf").sha256 and single.size_bytes == 3000
    folder = service.plan_download(service.repo_detail("TheOrg/Tiny-HF"))
    assert sorted(f.path for f in folder.files) == ["config.json", "model.safetensors", "tokenizer.json"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"quant": "Q2_K"}, r"no GGUF file has quantization Q2_K \(available: Q4_K_M, Q8_0\)"),
        ({}, r"Choose a file or a quantization in TheOrg/Tiny-GGUF \(available: Q4_K_M, Q8_0\)"),
        ({"files": ["nope.gguf"]}, r"has no file 'nope.gguf'\.$"),
    ],
)
def test_plan_download_bad_choices_say_what_exists(hub, kwargs, message):
    detail = HubService().repo_detail("TheOrg/Tiny-GGUF", with_card=False)
    with pytest.raises(HubError, match=message) as caught:
        HubService().plan_download(detail, **kwargs)
    assert caught.value.reason == "bad_input" and caught.value.kind is ErrorKind.INVALID_INPUT


def test_unknown_repo_and_unreachable_hub_are_clear(hub, monkeypatch):
    with pytest.raises(HubError, match="Nobody/Nothing was not found") as caught:
        HubService().repo_detail("Nobody/Nothing")
    assert caught.value.reason == "not_found" and caught.value.kind is ErrorKind.NOT_FOUND
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # read at call time, not at import
    with pytest.raises(HubError, match=r"Cannot reach the Hub at http://127.0.0.1:9") as caught:
        HubService().repo_detail("TheOrg/Tiny-GGUF")
    assert caught.value.reason == "network" and caught.value.kind is ErrorKind.UNAVAILABLE


def test_remote_gguf_header_grows_its_range_prefix(hub, tiny_gguf, monkeypatch):
    data = tiny_gguf.read_bytes()
    hub.add(Repo("TheOrg/Real-GGUF", {"tiny-F16.gguf": data}, tags=["gguf"]))
    monkeypatch.setattr(hub_module, "HEADER_PREFIX_BYTES", 1024)  # far below the tokenizer's size
    service = HubService()
    detail = service.repo_detail("TheOrg/Real-GGUF")
    header = service.remote_header(detail, detail.candidates[0])
    assert header.architecture == "llama" and header.block_count == 2
    gets = [e for e in hub.log if e.path == "tiny-F16.gguf"]
    assert len(gets) >= 2 and gets[0].sent_bytes == 1024 and gets[-1].sent_bytes > 1024
    assert sum(e.sent_bytes for e in gets) < len(data)  # never the whole file


def test_remote_header_of_a_non_gguf_is_a_clear_error(hub):
    service = HubService()
    detail = service.repo_detail("TheOrg/Tiny-GGUF", with_card=False)
    with pytest.raises(GgufFileError):
        service.remote_header(detail, detail.candidates[0])


def test_token_from_settings_else_huggingface_hub_store(hub, monkeypatch):
    assert resolve_token("") is None
    assert resolve_token("  hf_abc  ") == "hf_abc"
    monkeypatch.setenv("HF_TOKEN", "hf_fromenvironment")
    assert resolve_token("") == "hf_fromenvironment"


def test_remote_estimate_and_verdict_match_the_local_file(hub, tiny_gguf):
    from app.core.gguf.header import read_gguf_header
    from app.core.memory.estimate import EstimateSettings, estimate_memory
    from app.core.memory.fit import MachineMemory, fit_verdict

    hub.add(Repo("TheOrg/Real-GGUF", {"tiny-F16.gguf": tiny_gguf.read_bytes()}, tags=["gguf"]))
    service = HubService()
    detail = service.repo_detail("TheOrg/Real-GGUF", with_card=False)
    settings = EstimateSettings(n_ctx=1024)
    machine = MachineMemory((), (), (), 8 << 30, 4 << 30, "no NVIDIA GPU")
    estimate, verdict = service.estimate(detail, detail.candidates[0], settings, machine)
    local = read_gguf_header(tiny_gguf)
    assert estimate == estimate_memory(local, settings)
    assert verdict == fit_verdict(local, settings, machine) and verdict.state == "fits"
    tiny_machine = MachineMemory((), (), (), 1 << 20, 1 << 10, "no NVIDIA GPU")
    assert service.estimate(detail, detail.candidates[0], settings, tiny_machine)[1].state == "wont_fit"


def test_a_split_gguf_is_one_candidate_whose_estimate_counts_every_shard(hub, tmp_path, monkeypatch):
    import functools

    import gguf

    from app.core.gguf.header import read_gguf_header
    from app.core.memory.estimate import EstimateSettings, estimate_memory
    from app.core.memory.fit import MachineMemory
    from tests.support.gguf_factory import write_tiny_gguf

    for folder in ("whole", "split"):
        (tmp_path / folder).mkdir()
    whole = write_tiny_gguf(tmp_path / "whole" / "tiny-Q8_0.gguf")
    monkeypatch.setattr(gguf, "GGUFWriter", functools.partial(gguf.GGUFWriter, split_max_tensors=8))
    write_tiny_gguf(tmp_path / "split" / "tiny-Q8_0.gguf")  # gguf-split naming: -0000N-of-00003.gguf
    shards = {p.name: p.read_bytes() for p in sorted((tmp_path / "split").iterdir())}
    assert len(shards) == 3
    hub.add(Repo("TheOrg/Split-GGUF", shards, tags=["gguf"]))
    service = HubService()
    detail = service.repo_detail("TheOrg/Split-GGUF", with_card=False)
    [candidate] = detail.candidates
    assert candidate.quant == "Q8_0" and candidate.shard_count == 3 and candidate.complete
    settings = EstimateSettings(n_ctx=512)
    machine = MachineMemory((), (), (), 8 << 30, 4 << 30, "no NVIDIA GPU")
    estimate, _verdict = service.estimate(detail, candidate, settings, machine)
    assert estimate.weights_bytes == estimate_memory(read_gguf_header(whole), settings).weights_bytes
    assert (
        estimate.weights_bytes
        > estimate_memory(read_gguf_header(tmp_path / "split" / next(iter(shards))), settings).weights_bytes
    )


def test_a_mirror_that_ignores_range_is_not_read_to_the_end(hub, tiny_gguf):
    import time

    gguf_bytes = tiny_gguf.read_bytes()
    padded = gguf_bytes + random_bytes(64 << 20, 7)  # the tensor data of a big model
    hub.add(Repo("TheOrg/Big-GGUF", {"big-F16.gguf": padded}, tags=["gguf"]))
    hub.ignore_range = True
    service = HubService()
    detail = service.repo_detail("TheOrg/Big-GGUF", with_card=False)
    assert service.read_prefix(detail.id, detail.commit, "big-F16.gguf", 4096) == padded[:4096]
    header = service.remote_header(detail, detail.candidates[0])
    assert header.architecture == "llama" and header.block_count == 2
    deadline = time.monotonic() + 10  # a response is logged when its handler stops sending
    while len([e for e in hub.log if e.path == "big-F16.gguf"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    gets = [e for e in hub.log if e.path == "big-F16.gguf"]
    assert len(gets) == 2 and all(e.status == 200 for e in gets)  # the whole file was offered each time
    assert all(e.sent_bytes < len(padded) // 2 for e in gets)  # but the connection was closed early


def test_a_remote_gguf_shorter_than_its_header_says_it_is_damaged(hub, tiny_gguf):
    data = tiny_gguf.read_bytes()
    repo = hub.add(Repo("TheOrg/Cut-GGUF", {"cut-F16.gguf": data}, tags=["gguf"]))
    service = HubService()
    detail = service.repo_detail("TheOrg/Cut-GGUF", with_card=False)
    repo.files["cut-F16.gguf"] = data[:3000]  # the copy served now ends inside the tokenizer's metadata
    with pytest.raises(GgufFileError, match=r"cut-F16.gguf: the file ends \(3,000 bytes\) before the header") as e:
        service.remote_header(detail, detail.candidates[0])
    assert "truncated or damaged" in str(e.value) and "larger than" not in str(e.value)


def test_an_answer_without_a_commit_id_is_usable_only_for_a_commit_revision(hub):
    hub.repos["TheOrg/Tiny-GGUF"].info_extra = {"sha": None}
    with pytest.raises(HubError, match="the server gave the commit id None") as caught:
        HubService().repo_detail("TheOrg/Tiny-GGUF", with_card=False)
    assert caught.value.reason == "bad_answer"
    commit = "ab" * 20
    assert HubService().repo_detail("TheOrg/Tiny-GGUF", commit, with_card=False).commit == commit


def test_a_listed_sha256_is_kept_lowercase(hub):
    sha = "AB" * 32
    hub.repos["TheOrg/Tiny-GGUF"].sibling_extra = {
        "tiny-Q4_K_M.gguf": {"lfs": {"size": 3000, "sha256": sha, "pointerSize": 134}}
    }
    detail = HubService().repo_detail("TheOrg/Tiny-GGUF", with_card=False)
    assert detail.file("tiny-Q4_K_M.gguf").sha256 == sha.lower()


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("call", ["search", "repo_detail", "read_prefix"])
def test_an_unreachable_hub_fails_and_says_so(monkeypatch, tmp_path, call):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    service = HubService()
    calls = {
        "search": lambda: service.search("qwen gguf"),
        "repo_detail": lambda: service.repo_detail("TheOrg/Tiny-GGUF"),
        "read_prefix": lambda: service.read_prefix("TheOrg/Tiny-GGUF", "a" * 40, "x.gguf", 100),
    }
    with pytest.raises(HubError, match=r"^Cannot reach the Hub at http://127\.0\.0\.1:\d+ \(ConnectError\)") as caught:
        calls[call]()
    assert caught.value.reason == "network" and caught.value.kind is ErrorKind.UNAVAILABLE


def test_a_search_is_one_request_with_no_retry_loop(monkeypatch, tmp_path):
    """A server that drops every connection: huggingface_hub's own search would try six times with backoff."""
    import socket
    import threading
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    accepted: list[int] = []  # the client port of each connection, in the order they came
    stop = threading.Event()

    def drop_connections() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            accepted.append(peer[1])
            conn.close()

    thread = threading.Thread(target=drop_connections, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    try:
        with pytest.raises(HubError, match="Cannot reach the Hub") as caught:
            HubService().search("x")
        assert caught.value.reason == "network"
        # Any retry connected before the call gave up; a connection of ours queues behind them all.
        marker = socket.create_connection(server.getsockname())
        port = marker.getsockname()[1]
        deadline = time.monotonic() + 30
        while port not in accepted and time.monotonic() < deadline:
            time.sleep(0.01)
        marker.close()
        assert accepted.index(port) == 1  # one connection before ours: no retry
    finally:
        stop.set()
        thread.join(2)
        server.close()
