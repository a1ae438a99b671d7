"""Small helpers shared by the analysis modules: frame columns to numpy, kernel classes, grouping."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import intervals as iv

COMPUTE = "compute"
NCCL = "nccl"
COPY_KINDS = ("memcpy", "memset")


def ints(series: pd.Series, fill: int = -1) -> np.ndarray:
    """A nullable integer column as int64 numpy, missing values replaced by ``fill``. A plain int64 column
    comes back as a read-only view, not a copy (a 10M-kernel trace keeps ~32 B/row less)."""
    if series.dtype == np.int64:
        return series.to_numpy()
    return pd.to_numeric(series, errors="coerce").fillna(fill).to_numpy(dtype=np.int64)


def positions(df: pd.DataFrame, keys: list[str]) -> dict:
    """Positional row indices per group key (missing keys form no group); one pass, no per-row Python."""
    if df.empty:
        return {}
    return {k: np.asarray(v) for k, v in df.reset_index(drop=True).groupby(keys, sort=True).indices.items()}


def int_groups(*cols: np.ndarray) -> list[np.ndarray]:
    """Positional row indices per distinct tuple of integer columns (order of the groups unspecified).

    Hash-factorises each column (few distinct values: pids, devices), combines the codes into one, and
    splits one stable argsort: row order inside each group is preserved. Cheaper than a DataFrame groupby
    on millions of rows."""
    if len(cols[0]) == 0:
        return []
    code = np.zeros(len(cols[0]), dtype=np.int64)
    for c in cols:
        k, u = pd.factorize(c)
        code = code * (len(u) + 1) + k
    code, _ = pd.factorize(code)
    order = np.argsort(code, kind="stable")
    cuts = np.flatnonzero(np.diff(code[order])) + 1
    return np.split(order, cuts)


class KernelArrays:
    """Start/end/launch arrays of one kernels frame plus class masks, computed once per analysis."""

    def __init__(self, kernels: pd.DataFrame):
        k = kernels.reset_index(drop=True)
        self.frame = k
        self.start = ints(k["start_ns"], 0)
        self.end = ints(k["end_ns"], 0)
        self.launch = ints(k["launch_ns"], -1)
        kind = k["kind"]
        if isinstance(kind.dtype, pd.CategoricalDtype):  # classify each category once, then index by code
            cats = np.append(np.asarray(kind.cat.categories, dtype=object), None)
            codes = kind.cat.codes.to_numpy()
            self.is_compute, self.is_nccl = (cats == COMPUTE)[codes], (cats == NCCL)[codes]
            self.is_copy = np.isin(cats, COPY_KINDS)[codes]
        else:
            kind = kind.astype("object").to_numpy()
            self.is_compute, self.is_nccl, self.is_copy = kind == COMPUTE, kind == NCCL, np.isin(kind, COPY_KINDS)
        self.pid = ints(k["pid"], -1)
        self.rank = ints(k["rank"], -1)
        self.device = ints(k["device"], -1)
        # Kernel names as integer codes (order of first appearance) and their distinct values: grouping by
        # name then works on integers, whatever the column's dtype (categorical from the loader, or object).
        self.name_code, self.names = pd.factorize(k["name"], use_na_sentinel=True)

    def name_values(self) -> np.ndarray:
        """Distinct names as an object array indexed by ``name_code``; code -1 (no name) gives None."""
        return np.append(np.asarray(self.names, dtype=object), None)

    def rank_sets(self, rank) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """:meth:`sets` of one rank's kernels, computed once and cached (steps and overlap both use them)."""
        cache = self.__dict__.setdefault("_rank_sets", {})
        if rank not in cache:
            cache[rank] = self.sets(np.flatnonzero(self.rank == rank))
        return cache[rank]

    def sets(self, idx: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Normalised interval sets (merged across streams) of the rows ``idx``, by kernel class."""
        s, e = self.start[idx], self.end[idx]
        out = {
            COMPUTE: iv.normalize(s[self.is_compute[idx]], e[self.is_compute[idx]]),
            NCCL: iv.normalize(s[self.is_nccl[idx]], e[self.is_nccl[idx]]),
            "copy": iv.normalize(s[self.is_copy[idx]], e[self.is_copy[idx]]),
            "all": iv.normalize(s, e),
        }
        out["overlap"] = iv.intersect(out[COMPUTE], out[NCCL])
        return out


def pct(num, den):
    """100·num/den as float, NaN where den is 0 (vectorised)."""
    num = np.asarray(num, dtype=float)
    den = np.asarray(den, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, 100.0 * num / np.where(den > 0, den, 1), np.nan)
