"""Run as a child process: create a llama.cpp model and context with given settings so llama.cpp logs its
buffer sizes on stderr, then free them. ``python -m app.backends.llamacpp.probe MODEL '{"n_ctx": 4096, ...}'``.

It uses llama-cpp-python's low-level API so that ``n_parallel`` (``n_seq_max``) can be set, and applies the
same caps ``llama_cpp.Llama`` does (``n_batch <= n_ctx``, ``n_ubatch <= n_batch``). It is a separate process
so the native log never mixes with the app's own output, and a native abort only ends this child.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from app.core import safe_json

_GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}


def context_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The llama_context_params fields for an estimate's settings dict (EstimateSettings as a dict)."""
    n_ctx = int(settings.get("n_ctx", 4096))
    n_batch = min(int(settings.get("n_batch", 2048)), n_ctx)
    return {
        "n_ctx": n_ctx,
        "n_batch": n_batch,
        "n_ubatch": min(int(settings.get("n_ubatch", 512)), n_batch),
        "n_seq_max": int(settings.get("n_parallel", 1)),
        "flash_attn_type": 1 if settings.get("flash_attn") else 0,
        "type_k": _GGML_TYPES[settings.get("type_k", "f16")],
        "type_v": _GGML_TYPES[settings.get("type_v", "f16")],
        "swa_full": bool(settings.get("swa_full", True)),
        "n_threads": 1,
        "n_threads_batch": 1,
    }


def main(argv: list[str]) -> int:
    model_path, settings = argv[0], safe_json.loads_object(argv[1], what="the probe's settings argument")
    import llama_cpp

    llama_cpp.llama_backend_init()
    model_params = llama_cpp.llama_model_default_params()
    model_params.n_gpu_layers = int(settings.get("n_gpu_layers", 0))
    model = llama_cpp.llama_model_load_from_file(model_path.encode(), model_params)
    if not model:
        print(json.dumps({"error": "llama.cpp could not load the model"}), flush=True)
        return 1
    try:
        params = llama_cpp.llama_context_default_params()
        for name, value in context_settings(settings).items():
            setattr(params, name, value)
        ctx = llama_cpp.llama_init_from_model(model, params)
        if not ctx:
            print(json.dumps({"error": "llama.cpp could not create the context"}), flush=True)
            return 1
        print(json.dumps({"n_ctx": llama_cpp.llama_n_ctx(ctx)}), flush=True)
        llama_cpp.llama_free(ctx)
    finally:
        llama_cpp.llama_model_free(model)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
