"""The one number formatter of the CLI, the pages and the findings: ns shown as ms, bytes as MiB / GiB,
percentages with one decimal; never a nanosecond count in e-notation.

Precision fits the size: durations and plain numbers carry 3 significant digits (:func:`sig`: '384 ms',
'4.51 ms', '0.123 ms'), never more than 3 decimals and never fewer whole digits than the value has
('1,234 ms'), with thousands separators; durations in ms (µs only where a column is already in µs:
per-launch and α-β latencies, and tooltips under 1 ms); bytes in binary MiB / GiB (1 MiB = 2**20 bytes,
the harness's bucket caps are MiB too; GPU memory columns in GiB); percentages with 1 decimal. A value that
rounds to zero is shown without a minus sign; a missing value (None, NaN, pandas' NA) as '–'.

A column's unit follows from its name (``_ns`` → ms, ``_bytes`` → MiB, memory → GiB, ``_pct`` → %), so a
table's header and its cells always agree: :func:`display_value` converts, :func:`cell_text` writes,
:func:`unit_label` names the header. It imports nothing of the package (commands, report, plots and the
findings all use it).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

GIB_COLUMNS = (
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "optimizer_state_bytes",
    "memory_bytes",
    "total_memory_bytes",
)
"""Byte columns shown in GiB (binary, 2**30 bytes): GPU memory; other byte columns are MiB."""

MIB_COLUMNS = ("bytes", "min_bytes", "max_bytes", "s_mib", "b_star_mib")
DASH = "–"


def missing(v) -> bool:
    """None, NaN, pandas' NA / NaT (nullable columns): a value shown as '–', never '<NA>'."""
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    try:
        return not isinstance(v, (str, bool)) and math.isnan(float(v))
    except (TypeError, ValueError):
        return False


def no_negative_zero(text: str) -> str:
    """'-0.000' -> '0.000': a value that rounds to zero is shown without a sign."""
    return text[1:] if text.startswith("-") and not any(c in "123456789" for c in text) else text


SIG_DIGITS = 3
"""Significant digits of a duration or plain number (:func:`sig`)."""


def sig_decimals(x: float, digits: int = SIG_DIGITS, max_decimals: int = 3) -> int:
    """Decimals that give ``x`` ``digits`` significant digits, 0 to ``max_decimals`` (whole digits are never
    rounded away); a value that rounds up a decade (99.96 -> '100') loses a decimal."""
    x = abs(float(x))
    if x == 0 or not math.isfinite(x):
        return max_decimals if x == 0 else 0
    d = min(max_decimals, max(0, digits - 1 - math.floor(math.log10(x))))
    if d > 0 and abs(float(f"{x:.{d}f}")) >= 10 ** (digits - d):
        d -= 1
    return d


def sig(x, digits: int = SIG_DIGITS, max_decimals: int = 3) -> str:
    """A number with ``digits`` significant digits in fixed notation, thousands separators, at most
    ``max_decimals`` decimals: 384.306 -> '384', 4.509 -> '4.51', 0.12345 -> '0.123', 1234.5 -> '1,234'
    (the whole part is kept), 0 -> '0.000'; no minus sign on a value that rounds to zero."""
    x = float(x)
    return no_negative_zero(f"{x:,.{sig_decimals(x, digits, max_decimals)}f}")


def fmt_ms(ns, unit: bool = True) -> str:
    """ns -> '384 ms', '4.51 ms', '0.123 ms' (:func:`sig`: 3 significant digits); '–' when missing."""
    if missing(ns):
        return DASH
    return sig(float(ns) / 1e6) + (" ms" if unit else "")


def fmt_ms_many(values) -> list[str]:
    """:func:`fmt_ms` of every value of an array (one call per distinct value: a column of many rows repeats
    few values)."""
    values = np.asarray(values, dtype=float)
    if not values.size:
        return []
    uniq, inverse = np.unique(values, return_inverse=True)
    words = np.array([fmt_ms(v) for v in uniq.tolist()], dtype=object)
    return words[inverse.reshape(-1)].tolist()


def fmt_duration(ns) -> str:
    """Tooltips: '247 ms' / '4.51 ms' from 1 ms up, '235 µs' / '12.3 µs' below (3 significant digits, at most
    one decimal of µs); '–' if missing (the timeline's ddpDur() is the same in the browser)."""
    if missing(ns):
        return DASH
    ns = float(ns)
    us = sig(ns / 1e3, max_decimals=1)
    if abs(ns) >= 1e6 or abs(float(us.replace(",", ""))) >= 1000:
        return sig(ns / 1e6) + " ms"
    return us + " µs"


def fmt_mib(nbytes, unit: bool = True) -> str:
    """bytes -> '61.0 MiB' / '1.86 GiB' (binary); '–' when missing."""
    if missing(nbytes):
        return DASH
    mib = float(nbytes) / 2**20
    if unit and mib >= 1024:
        return f"{mib / 1024:,.2f} GiB"
    return (
        f"{mib:,.1f}" + (" MiB" if unit else "")
        if mib >= 1 or mib == 0
        else f"{mib:,.4g}" + (" MiB" if unit else "")
    )


def fmt_bytes(n) -> str:
    """Tooltips: '25.0 MiB' style, the unit chosen by size (B, KiB, MiB, GiB); '–' for missing."""
    if missing(n) or float(n) < 0:
        return DASH
    n = float(n)
    for u in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or u == "GiB":
            return f"{n:.0f} {u}" if u == "B" else f"{n:.1f} {u}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_gib(nbytes) -> str:
    """bytes -> '37.8 GiB', '3.00 GiB' (binary, 3 significant digits, at most 2 decimals, as the memory
    columns); '–' when missing."""
    return DASH if missing(nbytes) else sig(float(nbytes) / 2**30, max_decimals=2) + " GiB"


def fmt_cap(mib) -> str:
    """A bucket cap given in MiB -> '25 MiB'."""
    return DASH if missing(mib) else f"{float(mib):g} MiB"


def fmt_pct(v) -> str:
    """12.345 -> '12.3 %'; '–' when missing."""
    return DASH if missing(v) else no_negative_zero(f"{float(v):.1f}") + " %"


def fmt_number(v) -> str:
    """A plain number for prose and summaries: integers with separators, floats with 3 significant digits
    (:func:`sig`, never e-notation); text as is."""
    if isinstance(v, np.generic):
        v = v.item()
    if missing(v):
        return DASH
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int) or (float(v).is_integer() and abs(v) < 1e15):
        return f"{int(v):,}"
    return sig(v)


def display_value(col: str, v):
    """The number in the header's unit (or text, bool, None) for a value of column ``col``."""
    if isinstance(v, np.generic):
        v = v.item()
    if missing(v):
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    if col.endswith("_ns"):
        return float(v) / 1e6
    if col in GIB_COLUMNS:
        return float(v) / 2**30
    if col in ("bytes", "min_bytes", "max_bytes") or col.endswith("_bytes"):
        return float(v) / 2**20
    return v


def unit_label(col: str) -> str:
    """A column name with its unit as shown: 'step_ns' -> 'step (ms)', 'idle_pct' -> 'idle (%)',
    'peak_allocated_bytes' -> 'peak allocated (GiB)'; other names with '_' as spaces."""
    if col.endswith("_ns"):
        return col[:-3].replace("_", " ") + " (ms)"
    if col in GIB_COLUMNS:
        return col[:-6].replace("_", " ") + " (GiB)"
    if col.endswith("_bytes"):
        return col[:-6].replace("_", " ") + " (MiB)"
    if col.endswith("_pct"):
        return col[:-4].replace("_", " ") + " (%)"
    if col.endswith("_us"):
        return col[:-3].replace("_", " ") + " (µs)"
    return col.replace("_", " ")


def cell_text(col: str, v) -> str:
    """The one table-cell formatter: ms, GiB and plain numbers with 3 significant digits (:func:`sig`), MiB
    with 1 decimal (4 significant digits under 1 MiB), % with 1, counts with separators; a value that
    rounds to zero has no minus sign."""
    return no_negative_zero(_cell_text(col, v))


def _cell_text(col: str, v) -> str:
    d = display_value(col, v)
    if d is None:
        return DASH
    if isinstance(d, bool):
        return "yes" if d else "no"
    if isinstance(d, int):
        return f"{d:,}"
    if isinstance(d, float):
        if col.endswith(("_ns", "_ms")):
            return sig(d)
        if col in GIB_COLUMNS:
            return sig(d, max_decimals=2)
        if "pct" in col or "_us" in col or col.endswith("_per_s"):
            return f"{d:,.1f}"
        if col in MIB_COLUMNS or col.endswith("_bytes"):
            return f"{d:,.1f}" if abs(d) >= 1 else f"{d:.4g}"
        if col == "bucket_mb":
            return f"{d:g}"
        if col.endswith("_per_step"):  # a mean count: one decimal, whole or not
            return f"{d:,.1f}"
        if d.is_integer() and abs(d) < 1e15:
            return f"{int(d):,}"
        return sig(d)
    return str(d)


def text_table(df: pd.DataFrame, labels: dict[str, str] | None = None) -> str:
    """A frame as an aligned plain-text table for the terminal: headers with units (``labels`` or
    :func:`unit_label`), cells by :func:`cell_text`; numbers right-aligned, text left-aligned."""
    if df is None or not len(df):
        return "(none)"
    labels = labels or {}
    cols = [str(c) for c in df.columns]
    heads = [labels.get(c) or unit_label(c) for c in cols]
    cells = [[cell_text(c, v) for c, v in zip(cols, row, strict=False)] for row in df.itertuples(index=False)]
    numeric = [
        pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]) for c in df.columns
    ]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(heads)]

    def line(items):
        return "  ".join(
            s.rjust(w) if num else s.ljust(w) for s, w, num in zip(items, widths, numeric, strict=False)
        ).rstrip()

    return "\n".join([line(heads)] + [line(r) for r in cells])
