"""GPU clocks, temperature, power and throttle reasons from ``nvidia-smi``, to explain noise between repeats.

    nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv

prints a header line and one line per GPU, values with their units (``1980 MHz``, ``120.50 W``, the
throttle reasons as a hexadecimal bit mask, ``[N/A]`` where the driver has no value). :func:`parse` turns
that text into one dict per GPU; :func:`query` runs the command (drivers that dropped the
``clocks_throttle_reasons`` name get the same query with its successor ``clocks_event_reasons``) and
returns the parsed rows with the raw text, or the reason it could not. Standard library only.
"""  # noqa: E501

from __future__ import annotations

import csv
import io
import subprocess

FIELDS = (
    "index",
    "clocks.sm",
    "clocks.mem",
    "temperature.gpu",
    "power.draw",
    "clocks_throttle_reasons.active",
)
QUERY = ["nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv"]
QUERY_NEW_NAME = [QUERY[0], QUERY[1].replace("clocks_throttle_reasons", "clocks_event_reasons"), QUERY[2]]

# NVML's clocks-event (throttle) reason bits (nvmlClocksEventReason*), as nvidia-smi -q names them.
REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def _number(text: str) -> float | None:
    """``1980 MHz`` -> 1980.0, ``120.50 W`` -> 120.5, ``[N/A]`` / empty -> None."""
    word = text.strip().split(" ")[0] if text.strip() else ""
    try:
        return float(word)
    except ValueError:
        return None


def reasons(mask: int | None) -> list[str]:
    """Names of the throttle-reason bits set in ``mask`` (unknown bits as ``bit_0x...``)."""
    if mask is None:
        return []
    out = [name for bit, name in REASON_BITS.items() if mask & bit]
    rest = mask & ~sum(REASON_BITS)
    bit = 1
    while rest:
        if rest & bit:
            out.append(f"bit_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return out


def parse(text: str) -> list[dict]:
    """One dict per GPU line of the query's CSV output (the header line is skipped by content, so output
    with or without it parses); ``throttle_reasons`` lists the set bits' names. Lines with fewer fields
    than asked are skipped."""
    rows = []
    for fields in csv.reader(io.StringIO(text), skipinitialspace=True):
        if len(fields) < len(FIELDS) or fields[0].strip().lower() == "index":
            continue
        sm, mem, temp, power = (_number(fields[i]) for i in range(1, 5))
        raw_mask = fields[5].strip()
        try:
            mask: int | None = int(raw_mask, 16)
        except ValueError:
            mask = None
        index = _number(fields[0])
        rows.append(
            {
                "index": None if index is None else int(index),
                "sm_clock_mhz": sm,
                "mem_clock_mhz": mem,
                "temperature_c": temp,
                "power_w": power,
                "throttle_reasons_mask": raw_mask or None,
                "throttle_reasons": reasons(mask),
            }
        )
    return rows


def query(timeout_s: float = 10.0) -> dict:
    """{"gpus": [parsed rows], "raw": the command's output} or {"gpus": [], "error": why} (no nvidia-smi,
    a failure, a time-out); never raises."""
    last = "nvidia-smi not run"
    for command in (QUERY, QUERY_NEW_NAME):
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        except FileNotFoundError:
            return {"gpus": [], "error": "nvidia-smi not found"}
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"gpus": [], "error": f"nvidia-smi failed: {exc}"}
        if proc.returncode == 0:
            return {"gpus": parse(proc.stdout), "raw": proc.stdout}
        last = f"nvidia-smi exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}"
    return {"gpus": [], "error": last}


__all__ = ["FIELDS", "QUERY", "REASON_BITS", "parse", "query", "reasons"]
