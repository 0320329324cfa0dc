"""Models → Library shows a vision model with its projector (and a missing one in words), and its memory
estimate includes the projector; a projector file is never listed as a model of its own."""

from __future__ import annotations

import pytest

from app.core.units import format_bytes
from tests.support.projector_factory import write_tiny_projector, write_tiny_vision_model
from tests.support.waiting import until
from tests.ui.test_models_panel import _names, _open_library, _select


@pytest.fixture
def vision_library(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    folder = tmp_path / "modèles"
    (folder / "paired").mkdir(parents=True)
    (folder / "alone").mkdir()
    write_tiny_vision_model(folder / "paired" / "Tiny-VL-Q8_0.gguf", name="Tiny-VL paired")
    projector = write_tiny_projector(folder / "paired" / "mmproj-Tiny-VL-F16.gguf")
    write_tiny_vision_model(folder / "alone" / "Other-VL-Q8_0.gguf", name="Other-VL alone")
    return folder, projector.stat().st_size


def test_vision_models_show_their_projector_and_its_memory(qloop, make_window, vision_library):
    folder, projector_bytes = vision_library

    async def scenario():
        _window, panel = await _open_library(make_window, folder)
        assert sorted(_names(panel)) == ["Other-VL alone", "Tiny-VL paired"]  # the mmproj file is not a model
        estimator = panel.estimator
        await until(lambda: estimator.machine is not None)
        _select(panel, "Tiny-VL paired")
        await until(lambda: panel.details is not None and estimator.estimate is not None)
        images = panel.facts.value("Images")
        assert images == f"yes, with mmproj-Tiny-VL-F16.gguf ({format_bytes(projector_bytes)})"
        assert estimator.estimate.projector_bytes == projector_bytes
        assert "Includes the vision projector" in estimator.verdict_label.text()
        total = estimator.estimate.total_bytes
        _select(panel, "Other-VL alone")
        await until(lambda: panel.details is not None and estimator.estimate is not None and
                    estimator.estimate.projector_bytes == 0)  # fmt: skip
        assert panel.facts.value("Images").startswith("This model can read images but its projector file is missing")
        assert estimator.estimate.total_bytes == total - projector_bytes  # the same model without the projector
        assert "Includes the vision projector" not in estimator.verdict_label.text()

    qloop.run_until_complete(scenario())
