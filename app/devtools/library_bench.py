"""``bench library``: indexing N generated GGUFs, first scan (every header read) against a cached rescan.

The files have a realistic header (a 32k-token vocabulary, scores, token types, a tensor table for 16
layers) and small tensor data; the cached rescan builds a new ``ModelLibrary`` from the cache file on disk,
as the app does on its next start. Both scans run in the same process, on the same files, in the same run.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from app.services.library.index import LibraryRoots, ModelLibrary

VOCAB_SIZE = 32_000
N_LAYERS = 16


def write_bench_gguf(path: Path) -> Path:
    """One GGUF with a full-size header and small tensors (the header read is what the library pays for)."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("bench-model")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(8192)
    writer.add_embedding_length(64)
    writer.add_block_count(N_LAYERS)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"tok{i}" for i in range(VOCAB_SIZE)])
    writer.add_token_scores([0.0] * VOCAB_SIZE)
    writer.add_token_types([1] * VOCAB_SIZE)
    writer.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    for layer in range(N_LAYERS):
        for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_down"):
            writer.add_tensor(f"blk.{layer}.{part}.weight", np.zeros((64, 64), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def bench_library(n_files: int = 200, runs: int = 5) -> dict[str, Any]:
    """Seconds for the first scan and the median cached rescan of ``n_files`` GGUFs, and their ratio."""
    with tempfile.TemporaryDirectory(prefix="llmw-bench-library-") as temp:
        base = Path(temp)
        models = base / "models"
        models.mkdir()
        template = write_bench_gguf(base / "template.gguf")
        for i in range(n_files):
            shutil.copyfile(template, models / f"model-{i:04d}.gguf")
        cache_file = base / "library-index.json"
        roots = LibraryRoots((models,))
        started = time.perf_counter()
        first = ModelLibrary(roots, cache_file).scan()
        first_s = time.perf_counter() - started
        cached_times, cached_reads = [], []
        for _ in range(runs):
            started = time.perf_counter()
            again = ModelLibrary(roots, cache_file).scan()
            cached_times.append(time.perf_counter() - started)
            cached_reads.append(again.headers_read)
        cached_s = statistics.median(cached_times)
        return {
            "files": n_files,
            "file_size_bytes": template.stat().st_size,
            "entries": len(first.entries),
            "first_scan_s": round(first_s, 4),
            "first_scan_headers_read": first.headers_read,
            "cached_scan_s": round(cached_s, 4),
            "cached_scan_headers_read": max(cached_reads),
            "speedup": round(first_s / cached_s, 1) if cached_s > 0 else None,
            "runs": runs,
        }
