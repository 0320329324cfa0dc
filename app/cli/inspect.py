"""``llm-workstation inspect MODEL.gguf``: what a GGUF is, how much memory it needs and whether it fits; and
``bench estimate``: the estimate against llama.cpp's own buffer sizes."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from app.cli.common import EXIT_BAD_INPUT, fail, fail_error
from app.core.gguf.header import GgufFileError, read_gguf_header
from app.core.gguf.inspect import ModelInfo, inspect_gguf
from app.core.memory.estimate import KV_CACHE_TYPES, EstimateSettings, MemoryEstimate, estimate_memory
from app.core.memory.fit import fit_verdict
from app.core.units import MISSING, format_bytes

VERBS = ("inspect",)
BENCH_KINDS = ("estimate",)


def _add_settings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ctx", type=int, default=4096, help="context size in tokens (n_ctx)")
    parser.add_argument("--gpu-layers", type=int, default=0, help="layers offloaded to the GPU (-1: all)")
    parser.add_argument("--kv-type-k", default="f16", choices=sorted(KV_CACHE_TYPES), help="K cache type")
    parser.add_argument("--kv-type-v", default="f16", choices=sorted(KV_CACHE_TYPES), help="V cache type")
    parser.add_argument("--flash-attn", action="store_true", help="flash attention (needed for a quantized V)")
    parser.add_argument("--parallel", type=int, default=1, help="parallel sequences sharing n_ctx")
    parser.add_argument("--batch", type=int, default=2048, help="n_batch")
    parser.add_argument("--ubatch", type=int, default=512, help="n_ubatch (micro-batch)")


def add_parser(verbs: argparse._SubParsersAction) -> None:
    inspect = verbs.add_parser("inspect", help="a GGUF's metadata, memory estimate and whether it fits here")
    inspect.add_argument("model", help="path to a .gguf file")
    _add_settings(inspect)
    inspect.add_argument("--json", action="store_true", help="print one JSON object")


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:
    bench = kinds.add_parser("estimate", help="the memory estimate against llama.cpp's logged buffer sizes")
    bench.add_argument("models", nargs="*", help=".gguf files (default: generated shapes + the starter model)")
    bench.add_argument("--json", action="store_true")


def _settings(args: argparse.Namespace) -> EstimateSettings:
    return EstimateSettings(
        n_ctx=args.ctx,
        n_gpu_layers=args.gpu_layers,
        type_k=args.kv_type_k,
        type_v=args.kv_type_v,
        n_batch=args.batch,
        n_ubatch=args.ubatch,
        flash_attn=args.flash_attn,
        n_parallel=args.parallel,
    )


def run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if problems := settings.problems():
        return fail(" ".join(problems), EXIT_BAD_INPUT)
    try:
        header = read_gguf_header(args.model)
        info = inspect_gguf(args.model)
        estimate = estimate_memory(header, settings)
    except GgufFileError as exc:
        return fail_error(exc)
    from app.services.monitor.machine_memory import read_machine_memory

    machine = read_machine_memory()
    if machine.cpu_amx:  # llama.cpp keeps AMX copies of the matrices on this CPU
        settings = replace(settings, cpu_amx=True)
        estimate = estimate_memory(header, settings)
    verdict = fit_verdict(header, settings, machine)
    if args.json:
        fields = {"estimate": estimate.to_dict(), "cpu_amx": machine.cpu_amx, "fits": verdict.to_dict()}
        print(json.dumps({**info.to_dict(), **fields}))
        return 0
    print(_summary(info, estimate, settings))
    if estimate.gpu_layers and not machine.gpu_free_bytes:
        print("  (the GPU split is what a GPU machine would use: this one has no GPU, so all of it runs from RAM)")
    print(verdict.summary)
    for suggestion in verdict.suggestions:
        print(f"  - {suggestion}")
    return 0


def _summary(info: ModelInfo, estimate: MemoryEstimate, settings: EstimateSettings) -> str:
    kv_heads = info.head_count_kv
    heads = f"{info.head_count} heads, {kv_heads} KV head{'' if kv_heads == 1 else 's'}"
    dims = f", head dim {info.key_length}" if info.key_length else ""
    swa = f", sliding window {info.sliding_window} on {len(info.sliding_layers)} layers" if info.sliding_window else ""
    lines = [
        f"{info.name} ({info.architecture}, {info.parameter_count / 1e6:,.1f} M parameters)",
        f"  file: {info.path} ({format_bytes(info.file_size)}, GGUF v{info.gguf_version})",
        f"  quantization: {info.file_type or MISSING} (most bytes: {info.dominant_tensor_type})",
        f"  context: {info.context_length} tokens trained; layers {info.block_count}, "
        f"embedding {info.embedding_length}",
        f"  attention: {heads}{dims}{swa}",
        f"  tokenizer: {info.tokenizer_model}, {info.vocab_size} tokens, "
        f"BOS {info.bos_token!r}, EOS {info.eos_token!r}",
        f"  chat template: {'yes' if info.chat_template else 'none in the file'}",
    ]
    if info.split is not None:
        state = "all present" if info.split.complete else f"{len(info.split.missing)} missing"
        lines.append(f"  split: part {info.split.index} of {info.split.count} ({state})")
    lines.append(
        f"Memory at n_ctx={settings.n_ctx}, KV {settings.type_k}/{settings.type_v}, "
        f"{estimate.gpu_layers} GPU layers: weights {format_bytes(estimate.weights_bytes)}, "
        f"KV {format_bytes(estimate.kv_cache_bytes)}, "
        f"compute {format_bytes(estimate.compute_bytes)}; total {format_bytes(estimate.total_bytes)} "
        f"(GPU {format_bytes(estimate.gpu_bytes)}, host {format_bytes(estimate.host_bytes)})"
    )
    copies = (
        ("AMX (this CPU has Intel AMX)", estimate.weights_amx_bytes),
        ("CPU_REPACK", estimate.weights_repack_bytes),
    )
    if estimate.weights_copy_bytes:
        named = ", ".join(f"{name} {format_bytes(size)}" for name, size in copies if size)
        lines.append(f"  of the weights, llama.cpp's copies for its CPU kernels: {named}")
    return "\n".join(lines)


def run_bench(args: argparse.Namespace) -> int:
    from app.backends.llamacpp.cpu_features import llama_cpp_uses_amx
    from app.devtools import estimate_bench

    models = [Path(m) for m in args.models]
    for model in models:
        try:
            read_gguf_header(model)
        except GgufFileError as exc:
            return fail_error(exc)
    if not args.json:
        print("estimate/actual (llama.cpp's logged buffer sizes) per component, and the estimate's error")
        if llama_cpp_uses_amx():
            print("(llama.cpp uses Intel AMX on this CPU: the estimates include its AMX copies of the matrices)")
    with tempfile.TemporaryDirectory(prefix="llmw-estimate-") as folder:
        if not models:
            models = estimate_bench.generated_models(Path(folder)) + _starter_model()
        results = estimate_bench.run_comparisons(models, on_result=None if args.json else _print_row)
    if not results:
        return fail("llama.cpp loaded none of the models, so nothing was compared.")
    worst = estimate_bench.worst_errors(results)
    if args.json:
        fields = {"results": [r.to_dict() for r in results], "worst_error_percent": worst}
        print(json.dumps({**fields, "cpu_amx": llama_cpp_uses_amx()}))
    else:
        print("worst error: " + "  ".join(f"{c} {worst[c]:+.2f}%" for c in estimate_bench.COMPONENTS))
    return 0


def _starter_model() -> list[Path]:
    from app.services.paths import app_paths
    from app.services.starter_model import StarterModelError, ensure_starter_model, package_installed

    if not package_installed():
        return []
    try:
        return [ensure_starter_model(app_paths().models_dir)]
    except StarterModelError as exc:
        print(f"note: starter model skipped: {exc}", file=sys.stderr)
        return []


def _print_row(result: object) -> None:
    from app.devtools.estimate_bench import COMPONENTS, Comparison

    if not isinstance(result, Comparison):
        print(f"skipped: {result}", flush=True)
        return
    s = result.settings
    label = (
        f"{result.model[:26]:26} ctx {s.n_ctx:5} x{s.n_parallel} ub {s.n_ubatch:3} fa {int(s.flash_attn)} {s.type_k:4}"
    )
    label += " swa-full" if s.swa_full else " swa-min "
    cells = [
        f"{c} {result.estimated(c) / (1 << 20):8.2f}/{result.measured(c) / (1 << 20):8.2f} MiB "
        f"{result.error_percent(c):+6.2f}%"
        for c in COMPONENTS
    ]
    print(f"{label} | " + " | ".join(cells), flush=True)
