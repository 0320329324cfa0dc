"""Parse the buffer sizes llama.cpp logs when a model loads with ``verbose=True``.

The lines look like (the buffer name says where the memory lives: ``CPU``, ``CPU_Mapped``, ``CPU_REPACK``,
``AMX`` (host memory: the CPU backend's Intel AMX copy of weights), ``CUDA0``, ``CUDA_Host``, ``Metal`` ...)::

    load_tensors:          AMX model buffer size =    39.00 MiB
    load_tensors:   CPU_Mapped model buffer size =   235.16 MiB
    llama_context:        CPU  output buffer size =     1.00 MiB
    llama_kv_cache:        CPU KV buffer size =    12.00 MiB
    llama_kv_cache: size =   12.00 MiB (  4096 cells,   3 layers,  1/1 seqs), K (f16):    6.00 MiB, V (f16):    6.00 MiB
    sched_reserve:        CPU compute buffer size =   514.50 MiB
    ~llama_context:        CPU compute buffer size is 514.5020 MiB, matches expectation of 514.5020 MiB
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MIB = 1 << 20
CPU_COPY_BUFFERS = ("AMX", "CPU_REPACK")  # the CPU backend's copies of weights, next to the mapped file

_BUFFER = re.compile(r"^\S+:\s+(?P<buffer>\S+)\s+(?P<kind>model|output|KV|compute) buffer size =\s*(?P<mib>[\d.]+) MiB")
_PRECISE_COMPUTE = re.compile(r"^~llama_context:\s+(?P<buffer>\S+) compute buffer size is\s*(?P<mib>[\d.]+) MiB")
_KV_CACHE = re.compile(
    r"^llama_kv_cache: size =\s*(?P<mib>[\d.]+) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,"
    r"\s*(?P<seqs>\d+)/(?P<max_seqs>\d+) seqs\), K \((?P<type_k>\w+)\):\s*(?P<k_mib>[\d.]+) MiB,"
    r" V \((?P<type_v>\w+)\):\s*(?P<v_mib>[\d.]+) MiB"
)


def _bytes(mib: str) -> int:
    return round(float(mib) * MIB)


@dataclass(frozen=True)
class KvCacheLine:
    cells: int
    layers: int
    type_k: str
    type_v: str
    k_bytes: int
    v_bytes: int


@dataclass
class LlamaBuffers:
    """Buffer sizes (bytes, from MiB with 2 decimals, or 4 for the compute buffer) keyed by buffer name."""

    model: dict[str, int] = field(default_factory=dict)
    kv: dict[str, int] = field(default_factory=dict)
    compute: dict[str, int] = field(default_factory=dict)
    output: dict[str, int] = field(default_factory=dict)
    kv_caches: list[KvCacheLine] = field(default_factory=list)

    @property
    def weights_bytes(self) -> int:
        return sum(self.model.values())

    @property
    def weights_copy_bytes(self) -> int:
        """The CPU backend's AMX / CPU_REPACK copies of weights (part of ``weights_bytes``)."""
        return sum(self.model.get(name, 0) for name in CPU_COPY_BUFFERS)

    @property
    def kv_cache_bytes(self) -> int:
        return sum(self.kv.values())

    @property
    def compute_bytes(self) -> int:
        return sum(self.compute.values())

    @property
    def output_bytes(self) -> int:
        return sum(self.output.values())

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.compute_bytes + self.output_bytes

    @property
    def found(self) -> bool:
        return bool(self.model) and bool(self.compute)

    def to_dict(self) -> dict[str, object]:
        return {
            "weights_bytes": self.weights_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "compute_bytes": self.compute_bytes,
            "output_bytes": self.output_bytes,
            "total_bytes": self.total_bytes,
            "buffers": {"model": self.model, "kv": self.kv, "compute": self.compute, "output": self.output},
        }


def parse_llama_log(text: str) -> LlamaBuffers:
    """Collect every buffer-size line of one model load (KV buffers of an iSWA cache add up)."""
    found = LlamaBuffers()
    precise_compute: dict[str, int] = {}
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if match := _PRECISE_COMPUTE.match(line):
            precise_compute[match["buffer"]] = _bytes(match["mib"])
        elif match := _BUFFER.match(line):
            target = {"model": found.model, "KV": found.kv, "compute": found.compute, "output": found.output}
            bucket = target[match["kind"]]
            if match["kind"] == "KV":
                bucket[match["buffer"]] = bucket.get(match["buffer"], 0) + _bytes(match["mib"])
            else:
                bucket[match["buffer"]] = _bytes(match["mib"])
        elif match := _KV_CACHE.match(line):
            found.kv_caches.append(
                KvCacheLine(
                    cells=int(match["cells"]),
                    layers=int(match["layers"]),
                    type_k=match["type_k"],
                    type_v=match["type_v"],
                    k_bytes=_bytes(match["k_mib"]),
                    v_bytes=_bytes(match["v_mib"]),
                )
            )
    found.compute.update(precise_compute)
    return found
