"""How much memory llama.cpp needs for a GGUF under given load settings, split between GPU and host.

The arithmetic follows the llama.cpp that llama-cpp-python 0.3.36 vendors:

* Layers: a model has ``n_layer`` repeating blocks plus the output layer (index ``n_layer``). With
  ``n_gpu_layers = N`` the last N of those ``n_layer + 1`` go to the GPU (``i_gpu_start = n_layer + 1 - N``);
  the input layer (``token_embd``) always stays on the host. A model with tied embeddings (no
  ``output.weight``) gets a GPU copy of ``token_embd`` when its output layer is offloaded; on the host the
  duplicate is the output layer's matrix, which the CPU backend may copy (below).
* On the host the CPU backend copies matrices into a layout for its faster kernels, next to the memory-mapped
  file: into the ``AMX`` buffer on a CPU with Intel AMX (F16 and most quantized types), else into ``CPU_REPACK``
  (Q4_0 / Q4_K / IQ4_NL); ``app.core.memory.cpu_copies`` has the rules.
* KV cache: per layer ``cells * row_bytes(type, n_head_kv * head_dim)`` for K and for V; ``n_ctx`` is padded
  to 256 cells. Sliding-window layers (iSWA) get ``pad256(min(n_ctx, n_swa * n_seq + n_ubatch))`` cells unless
  the full-size SWA cache is on (llama-cpp-python's default, ``swa_full``). A layer's KV lives with its layer.
* Compute buffer: the allocator's peak over the graph, modelled as the largest of the attention step (the
  f32 KQ matrix and mask without flash attention), the feed-forward step and the output (logits) step,
  fitted to llama.cpp's logged sizes (see ``llm-workstation bench estimate``).
* Output buffer: one row of f32 logits per sequence, on the host.
* Vision projector (``mmproj``), when the model has one: its weights, loaded by mtmd on the GPU when layers are
  offloaded (llama-cpp-python's ``use_gpu``), else on the host. Its image-encoding compute buffer is small next
  to them for the tiny test projectors and is not modelled.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from app.core.gguf.header import GgufFileError, GgufHeader, TensorInfo, ggml_row_bytes
from app.core.memory.cpu_copies import cpu_copy

KV_CACHE_TYPES = {"f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "iq4_nl": 20}
_QUANTIZED_KV = {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"}
_CTX_PAD = 256
# Every 2nd (gemma2, cohere2: 4th) layer is global; llama.cpp's defaults when the GGUF has no pattern key.
_SWA_PATTERNS = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "cohere2": 4, "exaone4": 4}
_F32 = 4


class EstimateError(GgufFileError):
    """The header lacks what the estimate needs, or the settings are impossible; the message says which."""


@dataclass(frozen=True)
class EstimateSettings:
    n_ctx: int = 4096
    n_gpu_layers: int = 0  # -1: all
    type_k: str = "f16"
    type_v: str = "f16"
    n_batch: int = 2048
    n_ubatch: int = 512
    flash_attn: bool = False
    n_parallel: int = 1
    swa_full: bool = True  # llama-cpp-python's default: sliding-window layers get the whole context
    cpu_repack: bool = True  # the CPU backend's repacked copy of Q4_0/Q4_K/IQ4_NL weights
    # llama.cpp's AMX copy of host matrices: on when this machine's CPU and llama.cpp build use Intel AMX
    # (``app.backends.llamacpp.cpu_features.llama_cpp_uses_amx``; ``fit_verdict`` takes it from the machine)
    cpu_amx: bool = False
    projector_bytes: int = 0  # the vision projector's weights (its file's tensor data), loaded with the model
    # a draft model for speculative decoding, loaded beside the model with the same context and offload
    draft: GgufHeader | None = field(default=None, compare=False, repr=False)

    def problems(self) -> list[str]:
        """What is wrong with these settings, as sentences that say what to change."""
        found = []
        if self.n_ctx < 1:
            found.append(f"The context size must be at least 1 token (got {self.n_ctx}).")
        if self.n_batch < 1 or self.n_ubatch < 1 or self.n_parallel < 1:
            found.append("The batch sizes and the number of parallel sequences must be at least 1.")
        for which, kv_type in (("K", self.type_k), ("V", self.type_v)):
            if kv_type not in KV_CACHE_TYPES:
                found.append(f"Unknown {which} cache type {kv_type!r}: use one of {', '.join(KV_CACHE_TYPES)}.")
        if self.type_v in _QUANTIZED_KV and not self.flash_attn:
            found.append(f"A quantized V cache ({self.type_v}) needs flash attention: turn it on or use f16.")
        return found


@dataclass(frozen=True)
class MemoryEstimate:
    weights_bytes: int
    weights_gpu_bytes: int
    weights_host_bytes: int
    kv_cache_bytes: int
    kv_gpu_bytes: int
    kv_host_bytes: int
    compute_bytes: int
    compute_gpu_bytes: int
    compute_host_bytes: int
    total_bytes: int
    gpu_bytes: int
    host_bytes: int
    output_bytes: int = 0  # logits buffer (host), part of host_bytes and total_bytes
    kv_cells: int = 0
    kv_swa_cells: int = 0
    gpu_layers: int = 0  # repeating layers on the GPU (the output layer not counted)
    # The CPU backend's copies of host weights (buffers AMX and CPU_REPACK), part of weights_host_bytes
    weights_amx_bytes: int = 0
    weights_repack_bytes: int = 0
    projector_bytes: int = 0  # the vision projector, part of gpu_bytes (offloaded) or host_bytes, and total_bytes
    projector_gpu_bytes: int = 0
    draft_bytes: int = 0  # the draft model (weights, KV cache, buffers), part of gpu_bytes/host_bytes and total_bytes
    draft_gpu_bytes: int = 0

    @property
    def weights_copy_bytes(self) -> int:
        return self.weights_amx_bytes + self.weights_repack_bytes

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs from a header, per layer where GGUF allows per-layer values."""

    n_layer: int
    n_embd: int
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    head_dim_k: int
    head_dim_v: int
    n_ff: int
    n_vocab: int
    n_swa: int
    swa_layers: tuple[bool, ...]
    tied_output: bool


def model_shape(header: GgufHeader) -> ModelShape:
    """The shape llama.cpp derives from the metadata; raises EstimateError when a key is missing or malformed."""
    try:
        return _model_shape(header)
    except (ValueError, TypeError) as exc:
        if isinstance(exc, EstimateError):
            raise
        raise EstimateError(
            f"{header.path.name} has malformed shape metadata ({exc}), so its memory cannot be estimated."
        ) from exc


def _model_shape(header: GgufHeader) -> ModelShape:
    name = header.path.name

    def required(key: str) -> int | list:
        value = header.arch_value(key)
        if value is None:
            raise EstimateError(f"{name} has no {header.architecture}.{key}, so its memory cannot be estimated.")
        return value

    n_layer, n_embd = int(_scalar(required("block_count"))), int(_scalar(required("embedding_length")))
    n_head = _per_layer(required("attention.head_count"), n_layer)
    kv_value = header.arch_value("attention.head_count_kv")
    n_head_kv = _per_layer(kv_value, n_layer) if kv_value is not None else n_head
    head_dim_k = int(header.arch_value("attention.key_length") or n_embd // max(max(n_head), 1))
    head_dim_v = int(header.arch_value("attention.value_length") or head_dim_k)
    n_ff = max(_per_layer(header.arch_value("feed_forward_length") or 4 * n_embd, n_layer))
    n_vocab = header.array_lengths.get("tokenizer.ggml.tokens") or len(header.metadata.get("tokenizer.ggml.tokens", []))
    embd = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    if embd is not None and len(embd.shape) == 2:
        n_vocab = embd.shape[1]
    n_swa = int(header.arch_value("attention.sliding_window") or 0)
    return ModelShape(
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=head_dim_k,
        head_dim_v=head_dim_v,
        n_ff=n_ff,
        n_vocab=int(n_vocab),
        n_swa=n_swa,
        swa_layers=sliding_layers(header, n_layer, n_swa),
        tied_output=not any(t.name == "output.weight" for t in header.tensors),
    )


def _scalar(value: int | list) -> int:
    return max(value) if isinstance(value, list) else value


def _per_layer(value: int | list, n_layer: int) -> tuple[int, ...]:
    if isinstance(value, list):
        if len(value) != n_layer:
            raise EstimateError(f"a per-layer value has {len(value)} entries for {n_layer} layers")
        return tuple(int(v) for v in value)
    return (int(value),) * n_layer


def sliding_layers(header: GgufHeader, n_layer: int, n_swa: int) -> tuple[bool, ...]:
    """Which layers use the sliding window: the GGUF's pattern array, else llama.cpp's per-architecture rule
    (with period P, layer ``il`` slides when ``il % P < P - 1``)."""
    if n_swa <= 0:
        return (False,) * n_layer
    pattern = header.arch_value("attention.sliding_window_pattern")
    if isinstance(pattern, list) and len(pattern) == n_layer:
        return tuple(bool(v) for v in pattern)
    period = pattern if isinstance(pattern, int) and pattern > 0 else _SWA_PATTERNS.get(header.architecture or "", 1)
    return tuple(il % period < period - 1 for il in range(n_layer)) if period > 1 else (True,) * n_layer


def gpu_layer_start(n_layer: int, n_gpu_layers: int) -> int:
    """First layer index (0..n_layer, where n_layer is the output layer) that llama.cpp puts on the GPU."""
    if n_gpu_layers < 0:
        return 0
    return max(n_layer + 1 - n_gpu_layers, 0)


def padded_ctx(n_ctx: int) -> int:
    return -(-n_ctx // _CTX_PAD) * _CTX_PAD


def estimate_memory(header: GgufHeader, settings: EstimateSettings) -> MemoryEstimate:
    """Weights, KV cache, compute and output buffers for ``settings``; raises EstimateError on bad input."""
    if problems := settings.problems():
        raise EstimateError(" ".join(problems))
    shape = model_shape(header)
    gpu_start = gpu_layer_start(shape.n_layer, settings.n_gpu_layers)
    weights_gpu, weights_host, copies = _weights(header, shape, gpu_start, settings)
    cells, swa_cells, ubatch = _cells(shape, settings)
    kv_gpu = kv_host = 0
    for il in range(shape.n_layer):
        layer_cells = swa_cells if shape.swa_layers[il] else cells
        k_bytes = ggml_row_bytes(KV_CACHE_TYPES[settings.type_k], shape.n_head_kv[il] * shape.head_dim_k)
        v_bytes = ggml_row_bytes(KV_CACHE_TYPES[settings.type_v], shape.n_head_kv[il] * shape.head_dim_v)
        layer_bytes = layer_cells * (k_bytes + v_bytes)
        if il >= gpu_start:
            kv_gpu += layer_bytes
        else:
            kv_host += layer_bytes
    compute = compute_buffer_bytes(shape, settings, cells // settings.n_parallel, swa_cells, ubatch)
    gpu_layers = max(shape.n_layer - gpu_start, 0)
    if gpu_start > shape.n_layer:  # nothing offloaded
        compute_gpu, compute_host = 0, compute
    elif gpu_start == 0:  # everything offloaded: the host only embeds the input tokens
        compute_gpu, compute_host = compute, ubatch * shape.n_embd * _F32
    else:  # partial offload: both backends plan a graph for their layers
        compute_gpu, compute_host = compute, compute
    output = shape.n_vocab * _F32 * settings.n_parallel
    projector_gpu = settings.projector_bytes if settings.n_gpu_layers != 0 else 0
    draft = _draft_estimate(settings)
    gpu = weights_gpu + kv_gpu + compute_gpu + projector_gpu + draft.gpu_bytes
    host = weights_host + kv_host + compute_host + output + settings.projector_bytes - projector_gpu + draft.host_bytes
    return MemoryEstimate(
        weights_bytes=weights_gpu + weights_host,
        weights_gpu_bytes=weights_gpu,
        weights_host_bytes=weights_host,
        kv_cache_bytes=kv_gpu + kv_host,
        kv_gpu_bytes=kv_gpu,
        kv_host_bytes=kv_host,
        compute_bytes=compute_gpu + compute_host,
        compute_gpu_bytes=compute_gpu,
        compute_host_bytes=compute_host,
        total_bytes=gpu + host,
        gpu_bytes=gpu,
        host_bytes=host,
        output_bytes=output,
        kv_cells=cells,
        kv_swa_cells=swa_cells if any(shape.swa_layers) else 0,
        gpu_layers=gpu_layers,
        weights_amx_bytes=copies.get("AMX", 0),
        weights_repack_bytes=copies.get("CPU_REPACK", 0),
        projector_bytes=settings.projector_bytes,
        projector_gpu_bytes=projector_gpu,
        draft_bytes=draft.total_bytes,
        draft_gpu_bytes=draft.gpu_bytes,
    )


@dataclass(frozen=True)
class _DraftTotals:
    gpu_bytes: int = 0
    host_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.gpu_bytes + self.host_bytes


def _draft_estimate(settings: EstimateSettings) -> _DraftTotals:
    """The draft model's own estimate at the same context and offload (one sequence, no projector)."""
    if settings.draft is None:
        return _DraftTotals()
    alone = estimate_memory(settings.draft, replace(settings, draft=None, projector_bytes=0, n_parallel=1))
    return _DraftTotals(alone.gpu_bytes, alone.host_bytes)


def _weights(
    header: GgufHeader, shape: ModelShape, gpu_start: int, settings: EstimateSettings
) -> tuple[int, int, dict[str, int]]:
    """(GPU bytes, host bytes, the host bytes of the CPU backend's copies by buffer name)."""
    gpu = host = 0
    copies: dict[str, int] = {}

    def copy_on_host(tensor: TensorInfo) -> None:
        if (copy := cpu_copy(tensor, amx=settings.cpu_amx, repack=settings.cpu_repack)) is not None:
            copies[copy[0]] = copies.get(copy[0], 0) + copy[1]

    output_on_gpu = gpu_start <= shape.n_layer
    for tensor in header.tensors:
        if tensor.name.startswith("blk."):
            layer = _layer_index(tensor.name)
            on_gpu = layer is not None and layer >= gpu_start
        elif tensor.name == "token_embd.weight":
            on_gpu = False
            if shape.tied_output and output_on_gpu:
                gpu += tensor.n_bytes  # the output layer's copy of the tied embeddings
            elif shape.tied_output:  # llama.cpp loads the duplicate as output.weight, a MUL_MAT weight
                copy_on_host(replace(tensor, name="output.weight"))
        else:
            on_gpu = output_on_gpu
        if on_gpu:
            gpu += tensor.n_bytes
            continue
        host += tensor.n_bytes
        copy_on_host(tensor)
    return gpu, host + sum(copies.values()), copies


def _layer_index(name: str) -> int | None:
    part = name.split(".", 2)[1]
    return int(part) if part.isdigit() else None


def _cells(shape: ModelShape, settings: EstimateSettings) -> tuple[int, int, int]:
    """(KV cells over all sequences, sliding-window cells over all sequences, micro-batch tokens)."""
    # llama-cpp-python caps n_batch at n_ctx, and llama.cpp n_ubatch at n_batch.
    ubatch = min(settings.n_ubatch, settings.n_batch, settings.n_ctx)
    n_seq = settings.n_parallel
    cells_per_seq = padded_ctx(max(settings.n_ctx // n_seq, 1))
    cells = cells_per_seq * n_seq
    if settings.swa_full or shape.n_swa <= 0:
        return cells, cells, ubatch
    swa_per_stream = padded_ctx(min(cells_per_seq, shape.n_swa + ubatch))
    return cells, swa_per_stream * n_seq, ubatch


def compute_buffer_bytes(
    shape: ModelShape, settings: EstimateSettings, cells_per_seq: int, swa_cells: int, ubatch: int
) -> int:
    """The graph allocator's peak for a worst-case micro-batch (``ubatch`` tokens, every one an output)."""
    n_head = max(shape.n_head)
    q_dim = n_head * shape.head_dim_k
    kv_dim = max(shape.n_head_kv) * shape.head_dim_k
    swa_per_seq = swa_cells // settings.n_parallel
    n_kv = cells_per_seq if not all(shape.swa_layers) else swa_per_seq
    mask_sizes = [cells_per_seq] + ([swa_per_seq] if any(shape.swa_layers) else [])
    mask_elem = 2 if settings.flash_attn else _F32
    masks = sum(size * ubatch * mask_elem for size in mask_sizes)
    ffn = ubatch * (3 * shape.n_ff + 4 * shape.n_embd) * _F32
    if settings.flash_attn:
        attention = ubatch * (4 * shape.n_embd + 2 * q_dim + 2 * kv_dim) * _F32
    else:
        kq = n_head * n_kv * ubatch * _F32
        attention = kq + ubatch * (3 * shape.n_embd + 2 * q_dim + 2 * kv_dim) * _F32
    output = ubatch * (shape.n_vocab + 2 * shape.n_embd) * _F32
    return max(max(attention, ffn) + masks, output)
