"""Parse NCCL kernel names into (collective, algorithm, protocol, dtype).

Forms seen in the wild (the part before '(' of a demangled name is used):

    ncclDevKernel_AllReduce_Sum_f32_RING_LL        NCCL >= 2.19: op, redop, dtype, algorithm, protocol
    ncclDevKernel_SendRecv                         point-to-point: no algorithm/protocol in the name
    ncclDevKernel_AllGather_RING_LL                no reduction, no dtype
    ncclKernel_AllReduce_RING_LL_Sum_float         NCCL < 2.19: algorithm and protocol first, C type names

Names are parsed once per distinct name (a trace has few), so this stays plain Python.
"""

from __future__ import annotations

NCCL_PREFIXES = ("ncclDevKernel", "ncclKernel")
ALGORITHMS = {"RING", "TREE", "COLLNET_DIRECT", "COLLNET_CHAIN", "COLLNET", "NVLS", "NVLS_TREE", "PAT"}
PROTOCOLS = {"LL", "LL128", "SIMPLE"}
REDOPS = {"Sum", "Prod", "Min", "Max", "PreMulSum", "SumPostDiv", "Avg"}
# Old C type names -> the short names newer NCCL uses.
DTYPES = {
    "float": "f32",
    "half": "f16",
    "double": "f64",
    "__nv_bfloat16": "bf16",
    "bfloat16": "bf16",
    "int8_t": "i8",
    "uint8_t": "u8",
    "int32_t": "i32",
    "uint32_t": "u32",
    "int64_t": "i64",
    "uint64_t": "u64",
    "__nv_fp8_e4m3": "f8e4m3",
    "__nv_fp8_e5m2": "f8e5m2",
}
SHORT_DTYPES = {"f16", "f32", "f64", "bf16", "i8", "u8", "i32", "u32", "i64", "u64", "f8e4m3", "f8e5m2"}


def is_nccl(name: str) -> bool:
    return name.startswith(NCCL_PREFIXES)


def parse_nccl(name: str) -> tuple[str | None, str | None, str | None, str | None]:
    """(collective, algorithm, protocol, dtype) of an NCCL kernel name; None for parts the name lacks."""
    if not is_nccl(name):
        return (None, None, None, None)
    base = name.split("(", 1)[0].strip()
    # C type names contain underscores (int8_t, __nv_bfloat16): rename them before splitting on "_".
    for ctype in sorted((t for t in DTYPES if "_" in t), key=len, reverse=True):
        if base.endswith("_" + ctype):
            base = base[: -len(ctype)] + DTYPES[ctype]
            break
    tokens = base.split("_")[1:]
    if not tokens:
        return (None, None, None, None)
    collective, rest = tokens[0], tokens[1:]
    joined: list[str] = []  # two-word algorithms (COLLNET_DIRECT, NVLS_TREE) become one token
    i = 0
    while i < len(rest):
        if "_".join(rest[i : i + 2]) in ALGORITHMS:
            joined.append("_".join(rest[i : i + 2]))
            i += 2
        else:
            joined.append(rest[i])
            i += 1
    algorithm = protocol = dtype = None
    for tok in joined:
        if tok in ALGORITHMS and algorithm is None:
            algorithm = tok
        elif tok in PROTOCOLS and protocol is None:
            protocol = tok
        elif tok in SHORT_DTYPES or tok in DTYPES:
            dtype = DTYPES.get(tok, tok)
    return (collective, algorithm, protocol, dtype)
