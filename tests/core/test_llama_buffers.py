from __future__ import annotations

from app.core.memory.llama_buffers import MIB, parse_llama_log

# A CUDA load with partial offload, in the format llama.cpp logs (buffer names as the CUDA backend names them).
GPU_LOG = """\
load_tensors: offloading 10 repeating layers to GPU
load_tensors:        CUDA0 model buffer size =  1200.50 MiB
load_tensors:   CPU_Mapped model buffer size =   300.25 MiB
llama_context:  CUDA_Host  output buffer size =     0.58 MiB
llama_kv_cache:      CUDA0 KV buffer size =   160.00 MiB
llama_kv_cache:        CPU KV buffer size =    32.00 MiB
llama_kv_cache: size =  192.00 MiB (  4096 cells,  12 layers,  1/1 seqs), K (f16):   96.00 MiB, V (f16):   96.00 MiB
sched_reserve:      CUDA0 compute buffer size =   300.01 MiB
sched_reserve:  CUDA_Host compute buffer size =    16.01 MiB
~llama_context:      CUDA0 compute buffer size is 300.0137 MiB, matches expectation of 300.0137 MiB
"""


def test_parses_gpu_and_host_buffers():
    buffers = parse_llama_log(GPU_LOG)
    assert buffers.model == {"CUDA0": round(1200.50 * MIB), "CPU_Mapped": round(300.25 * MIB)}
    assert buffers.kv_cache_bytes == 192 * MIB and buffers.kv == {"CUDA0": 160 * MIB, "CPU": 32 * MIB}
    assert buffers.compute["CUDA0"] == round(300.0137 * MIB)  # the 4-decimal figure wins
    assert buffers.compute["CUDA_Host"] == round(16.01 * MIB) and buffers.output_bytes == round(0.58 * MIB)
    assert buffers.kv_caches[0].cells == 4096 and buffers.kv_caches[0].type_k == "f16"
    assert buffers.found and buffers.total_bytes == sum(
        sum(d.values()) for d in (buffers.model, buffers.kv, buffers.compute, buffers.output)
    )


def test_iswa_kv_buffers_add_up():
    line = "llama_kv_cache:        CPU KV buffer size =    {:.2f} MiB\n"
    log = line.format(12) + line.format(60)
    assert parse_llama_log(log).kv == {"CPU": 72 * MIB}


def test_nothing_found():
    buffers = parse_llama_log("llama_model_load: error loading model\n")
    assert not buffers.found and buffers.total_bytes == 0


def test_the_amx_copy_is_host_memory_next_to_the_mapped_file():
    """llama.cpp on a CPU with Intel AMX: the AMX buffer holds copies of the matrices, CPU_Mapped the whole file."""
    log = (
        "done_getting_tensors: tensor 'token_embd.weight' (f16) (and 14 others) cannot be used with preferred "
        "buffer type AMX, using CPU instead\n"
        "load_tensors:          AMX model buffer size =    39.00 MiB\n"
        "load_tensors:   CPU_Mapped model buffer size =    40.16 MiB\n"
        "load_tensors:   CPU_REPACK model buffer size =     1.70 MiB\n"
    )
    buffers = parse_llama_log(log)
    assert buffers.model == {"AMX": 39 * MIB, "CPU_Mapped": round(40.16 * MIB), "CPU_REPACK": round(1.70 * MIB)}
    assert buffers.weights_bytes == sum(buffers.model.values())
    assert buffers.weights_copy_bytes == 39 * MIB + round(1.70 * MIB)
