"""Discover downloads a vision model's projector with it: the matching mmproj file of the same repository."""

from __future__ import annotations

import pytest

from app.core.gguf.header import read_gguf_header
from app.core.gguf.quant_names import HubFile, group_gguf_files, matching_projector
from app.core.memory.estimate import EstimateSettings, estimate_memory
from app.core.memory.fit import MachineMemory
from app.services.downloads.hub import HubService
from tests.support.hf_server import HubServer, Repo, random_bytes, use_hub


def candidates(*names: str):
    return group_gguf_files(HubFile(n, 100 + i) for i, n in enumerate(names))


@pytest.mark.parametrize(
    ("names", "model_quant", "expected"),
    [
        (("mmproj-Q8_0.gguf", "mmproj-F16.gguf", "mmproj-BF16.gguf"), "Q4_K_M", "mmproj-F16.gguf"),
        (("mmproj-model-bf16.gguf", "mmproj-model-q8_0.gguf"), "Q4_K_M", "mmproj-model-bf16.gguf"),
        (("mmproj-Q8_0.gguf", "mmproj-Q4_K_M.gguf"), "Q4_K_M", "mmproj-Q4_K_M.gguf"),  # the model's own quant
        (("mmproj-Q8_0.gguf",), "Q4_K_M", "mmproj-Q8_0.gguf"),
        (("model-Q4_K_M.gguf",), "Q4_K_M", None),  # no projector in the repository
    ],
)
def test_the_projector_chosen_for_a_model(names, model_quant, expected):
    chosen = matching_projector(candidates(*names), model_quant)
    assert (chosen.key if chosen else None) == expected


def test_a_vision_repos_model_is_planned_with_its_projector(monkeypatch, tmp_path):
    with HubServer() as server:
        use_hub(server, monkeypatch, tmp_path)
        server.add(
            Repo(
                "TheOrg/Tiny-VL-GGUF",
                {
                    "Q4_K_M/Tiny-VL-Q4_K_M.gguf": random_bytes(3000, 1),
                    "Tiny-VL-Q8_0.gguf": random_bytes(4000, 2),
                    "mmproj-Tiny-VL-Q8_0.gguf": random_bytes(300, 3),
                    "mmproj-Tiny-VL-F16.gguf": random_bytes(500, 4),
                },
                tags=["gguf"],
            )
        )
        service = HubService()
        detail = service.repo_detail("TheOrg/Tiny-VL-GGUF", with_card=False)
        by_quant = service.plan_download(detail, quant="Q4_K_M")
        assert [f.path for f in by_quant.files] == ["Q4_K_M/Tiny-VL-Q4_K_M.gguf", "mmproj-Tiny-VL-F16.gguf"]
        by_file = service.plan_download(detail, files=["Tiny-VL-Q8_0.gguf"], target_dir=str(tmp_path / "dl"))
        assert [f.path for f in by_file.files] == ["Tiny-VL-Q8_0.gguf", "mmproj-Tiny-VL-F16.gguf"]
        chosen = service.plan_download(detail, files=["Tiny-VL-Q8_0.gguf", "mmproj-Tiny-VL-Q8_0.gguf"])
        assert [f.path for f in chosen.files] == ["Tiny-VL-Q8_0.gguf", "mmproj-Tiny-VL-Q8_0.gguf"]  # as chosen
        alone = service.plan_download(detail, files=["mmproj-Tiny-VL-Q8_0.gguf"])
        assert [f.path for f in alone.files] == ["mmproj-Tiny-VL-Q8_0.gguf"]


def test_discovers_estimate_counts_the_projector_that_comes_with_the_model(monkeypatch, tmp_path, tiny_gguf):
    with HubServer() as server:
        use_hub(server, monkeypatch, tmp_path)
        server.add(
            Repo(
                "TheOrg/Real-VL-GGUF",
                {"tiny-F16.gguf": tiny_gguf.read_bytes(), "mmproj-F16.gguf": random_bytes(700_000, 9)},
                tags=["gguf"],
            )
        )
        service = HubService()
        detail = service.repo_detail("TheOrg/Real-VL-GGUF", with_card=False)
        model = next(c for c in detail.candidates if not c.is_projector)
        settings = EstimateSettings(n_ctx=1024)
        machine = MachineMemory((), (), (), 8 << 30, 4 << 30, "no NVIDIA GPU")
        estimate, verdict = service.estimate(detail, model, settings, machine)
    alone = estimate_memory(read_gguf_header(tiny_gguf), settings)
    assert estimate.projector_bytes == 700_000 and estimate.total_bytes == alone.total_bytes + 700_000
    assert verdict.needed_bytes == estimate.host_bytes
