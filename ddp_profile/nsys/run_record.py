"""The harness's run record (``<run>.json``), checked field by field before anything reads it.

The record only labels a trace, so a field of the wrong type (``"world_size": "2"``, a list where an
object belongs, ``NaN``, a rank count beyond 64 bits) is dropped with a warning naming the file and field;
the rest of the record is kept. Fields not listed here are kept as they are (nothing reads them).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from ddp_profile.errors import TraceError
from ddp_profile.nsys.files import export_stem, short_error
from ddp_profile.safeio import read_side_json

MAX_INT = 2**63 - 1
MAX_RANKS = 1 << 20
"""A world size beyond this (a million GPUs) is not a real run: dropped like a value of the wrong type
(pages build per-rank lists from it)."""


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_INT


def _pos_int(v) -> bool:
    return _int(v) and v >= 1


def _ranks(v) -> bool:
    return _pos_int(v) and v <= MAX_RANKS


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) < 1e300


def _str(v) -> bool:
    return isinstance(v, str)


def _sizes(v) -> bool:
    """A list of byte counts: integers 0..2^63-1 (an int64 column holds them)."""
    return isinstance(v, list) and all(_int(x) for x in v)


def _nums(v) -> bool:
    return isinstance(v, list) and all(_num(x) for x in v)


def _rows(v) -> bool:
    return isinstance(v, list) and all(_nums(x) for x in v)


def _dict(v) -> bool:
    return isinstance(v, dict)


def _bool(v) -> bool:
    return isinstance(v, bool)


FIELDS = {
    "run": (_str, "a string"),
    "run_name": (_str, "a string"),
    "name": (_str, "a string"),
    "strategy": (_str, "a string"),
    "model": (_str, "a string"),
    "dtype": (_str, "a string"),
    "backend": (_str, "a string"),
    "gpu_name": (_str, "a string"),
    "gpu_short": (_str, "a string"),
    "timing_source": (_str, "a string"),
    "world_size": (_ranks, f"a rank count (1..{MAX_RANKS})"),
    "bucket_count": (_int, "an integer"),
    "measured_steps": (_int, "an integer"),
    "warmup_steps": (_int, "an integer"),
    "bucket_mb": (_num, "a number"),
    "setup_s": (_num, "a number"),
    "step_ms_median": (_num, "a number"),
    "config": (_dict, "an object"),
    "layout": (_dict, "an object"),
    "bucket_bytes": (_nums, "a list of numbers"),
    "final_loss_per_rank": (_nums, "a list of numbers"),
    "step_ms_slowest_rank": (_nums, "a list of numbers"),
    "step_ms_per_rank": (_rows, "a list of lists of numbers"),
    "host_step_ms_per_rank": (_rows, "a list of lists of numbers"),
}
_TEXT, _FLAG, _COUNT, _NUMBER = (
    (_str, "a string"),
    (_bool, "true or false"),
    (_int, "an integer"),
    (_num, "a number"),
)
CONFIG_FIELDS = {
    "strategy": _TEXT,
    "model": _TEXT,
    "dtype": _TEXT,
    "optimizer": _TEXT,
    "backend": _TEXT,
    "ddp_comm_hook": _TEXT,
    "grad_reduce_dtype": _TEXT,
    "gc_mode": _TEXT,
    "gemm_sm_carveout_scope": _TEXT,
    "blas_library": _TEXT,
    "shard_optimizer": _TEXT,
    "fsdp_param_dtype": _TEXT,
    "batch": (_pos_int, "a positive integer"),
    "seq_len": (_pos_int, "a positive integer"),
    "steps": _COUNT,
    "warmup": _COUNT,
    "seed": _COUNT,
    "mlp_depth": _COUNT,
    "nccl_channels": _COUNT,
    "nccl_min_ctas": _COUNT,
    "gemm_sm_carveout": _COUNT,
    "bucket_mb": _NUMBER,
    "first_bucket_mb": _NUMBER,
    "lr": _NUMBER,
    "ddp_nvtx_hook": _FLAG,
    "nccl_high_priority": _FLAG,
    "peer_copy_allreduce": _FLAG,
    "grad_views": _FLAG,
    "reduce_avg": _FLAG,
    "sharded_update": _FLAG,
    "sharded_update_normal_priority": _FLAG,
    "step_sync": _FLAG,
    "cuda_graph": _FLAG,
    "overlap_optimizer": _FLAG,
    "fsdp_reshard": _FLAG,
    "world_size": (_ranks, f"a rank count (1..{MAX_RANKS})"),
}
"""The harness's ``RunConfig`` fields, each with the type its dataclass declares."""
LAYOUT_FIELDS = {
    "ddp_bucket_bytes": (_sizes, "a list of byte counts (integers 0..2^63-1)"),
    "reduce_bytes": (_sizes, "a list of byte counts (integers 0..2^63-1)"),
    "bucket_bytes": (_sizes, "a list of byte counts (integers 0..2^63-1)"),
    "buckets": _COUNT,
}
"""The layout fields the analysis and report read (the strategy's bucket plan)."""


def _check(data: dict, fields: dict, where: str, prefix: str, warnings: list[str]) -> dict:
    out = {}
    for key, value in data.items():
        rule = fields.get(key) if isinstance(key, str) else None
        if rule is not None and value is not None and not rule[0](value):
            warnings.append(
                f"{where}: run record field {prefix}{key!r} is {type(value).__name__} "
                f"{_short(value)}, expected {rule[1]}; ignored"
            )
            continue
        out[key] = value
    return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def clean_run_record(data: dict, where, warnings: list[str]) -> dict:
    """``data`` with every listed field of the wrong type removed (one warning each)."""
    out = _check(data, FIELDS, str(where), "", warnings)
    if isinstance(out.get("config"), dict):
        out["config"] = _check(out["config"], CONFIG_FIELDS, str(where), "config.", warnings)
    if isinstance(out.get("layout"), dict):
        out["layout"] = _check(out["layout"], LAYOUT_FIELDS, str(where), "layout.", warnings)
    return out


RANK_SUFFIX = re.compile(r"(?:^|[-_.])(?:rank|r)[-_]?\d+$", re.I)
"""The end of a per-rank export's name (``run_rank0``, ``run-r1``, ``rank0``): files whose names differ only there
name one job's ranks."""


def run_json_candidates(paths: list[Path]) -> list[Path]:
    """Where the harness's run record may sit, in order of preference, for each folder holding exports:
    ``run.json``, then ``<stem>.json`` for each export's stem (its name less ``.sqlite[.xz|.gz]``, with and
    without a rank suffix such as ``_rank0``), then ``<folder name>.json`` (the campaign's
    ``<run>/<run>.json``)."""
    out: list[Path] = []
    for folder in dict.fromkeys(p.resolve().parent for p in paths):
        out.append(folder / "run.json")
        for p in paths:
            if p.resolve().parent != folder:
                continue
            stem = export_stem(p)
            out += [folder / f"{stem}.json"] + (
                [folder / f"{bare}.json"] if (bare := RANK_SUFFIX.sub("", stem)) else []
            )
        out.append(folder / f"{folder.name}.json")
    return list(dict.fromkeys(out))


def find_run_json(paths: list[Path], warnings: list[str]) -> dict | None:
    """The first candidate (see :func:`run_json_candidates`) that holds a JSON object. One that cannot be
    read or parsed, or holds something else, adds a warning and is passed over: the run record only labels
    the trace, so a damaged one should not stop the analysis."""
    for candidate in run_json_candidates(paths):
        try:  # only a regular file, size-capped: a FIFO or a link to /dev/zero named run.json never blocks
            data = read_side_json(candidate)
        except TraceError as exc:
            why = short_error(exc).removeprefix(f"{candidate}: ")
            warnings.append(
                f"{candidate}: run record not read ({why}); run facts (strategy, model, ...) are unknown: "
                "fix or remove the file"
            )
            continue
        if data is None:
            continue
        if not isinstance(data, dict):
            warnings.append(
                f"{candidate}: run record is a JSON {type(data).__name__}, not an object; ignored"
            )
            continue
        return clean_run_record(
            data, candidate, warnings
        )  # fields of the wrong type: dropped, with a warning
    return None
