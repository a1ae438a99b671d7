"""Small helpers shared by the analysis modules: frame columns to numpy, kernel classes, grouping."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import intervals as iv
from ddp_profile.memory import return_freed_memory

COMPUTE = "compute"
NCCL = "nccl"
COPY_KINDS = ("memcpy", "memset")
TRIM_ROWS = (
    1 << 16
)  # ranks with at least this many kernels hand freed memory back before their sets are built


def ints(series: pd.Series, fill: int = -1) -> np.ndarray:
    """A nullable integer column as int64 numpy, missing values replaced by ``fill``. A plain int64 column
    comes back as a read-only view, not a copy (a 10M-kernel trace keeps ~32 B/row less)."""
    dtype = series.dtype
    if dtype == np.int64:
        return series.to_numpy()
    if isinstance(dtype, np.dtype) and dtype.kind in "iu":  # a narrow numpy integer column: one widening copy
        return series.to_numpy().astype(np.int64)
    if (
        isinstance(dtype, pd.core.dtypes.dtypes.BaseMaskedDtype) and dtype.kind in "iu"
    ):  # Int64, Int32: one copy
        return series.to_numpy(dtype=np.int64, na_value=fill)
    return pd.to_numeric(series, errors="coerce").fillna(fill).to_numpy(dtype=np.int64)


def int_codes(series: pd.Series, fill: int = -1) -> np.ndarray:
    """Like :func:`ints`, but a plain numpy integer column (the loader's int16 rank and device, int32 pid) comes back
    as a view in its own dtype: for grouping and comparing, where no arithmetic can overflow it."""
    if isinstance(series.dtype, np.dtype) and series.dtype.kind == "i":
        return series.to_numpy()
    return ints(series, fill)


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
    if len(cols) == 2 and all(c.dtype.kind == "i" and c.dtype.itemsize <= 4 for c in cols):
        # Two 32-bit columns (the loader's pid, device): one packed int64 key, one factorize.
        key = cols[0].astype(np.int64)
        key <<= 32
        key |= cols[1].astype(np.int32, copy=False).view(np.uint32)
        code, uniq = pd.factorize(key)
        del key
        if len(uniq) <= np.iinfo(np.int16).max:
            code = code.astype(np.int16)
        order = np.argsort(code, kind="stable")
        return np.split(order, np.flatnonzero(np.diff(code[order])) + 1)
    code = None
    for c in cols:  # combined in place (no temporaries per column): code = code * (len(u) + 1) + k
        k, u = pd.factorize(c)
        if code is None:
            code = k
        else:
            code *= len(u) + 1
            code += k
        del k
    code, uniq = pd.factorize(code)
    if len(uniq) <= np.iinfo(np.int16).max:  # few groups: a 16-bit stable sort is a radix sort, O(n)
        code = code.astype(np.int16)
    order = np.argsort(code, kind="stable")
    cuts = np.flatnonzero(np.diff(code[order])) + 1
    return np.split(order, cuts)


def equal_range(sorted_values: np.ndarray, value) -> tuple[int, int]:
    """[lo, hi) of the entries equal to ``value`` in a sorted array. The value is cast to the array's dtype
    first: a needle of another dtype (an int64 rank against the loader's int32 column) makes numpy convert
    the whole array on every call, which grew with ranks x kernels on 1,024 per-rank files."""
    dtype = sorted_values.dtype
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        try:
            as_int = int(value)
        except (TypeError, ValueError, OverflowError):
            as_int = None
        if as_int is None or as_int != value or not info.min <= as_int <= info.max:
            return 0, 0  # no integer entry equals it
        value = dtype.type(as_int)
    return (
        int(sorted_values.searchsorted(value, side="left")),
        int(sorted_values.searchsorted(value, side="right")),
    )


def pair_groups(a: np.ndarray, b: np.ndarray, max_groups: int = 64):
    """Positional row indices (ascending) per distinct (a, b) pair, one group at a time: a generator.

    Made for few groups over many rows (a trace's (pid, device) pairs: one per rank): each group is found
    with boolean masks (1 B per row) and only its own indices are held, where :func:`int_groups` holds a
    sort of all rows (8 B per row) plus its hashing temporaries at once. On 1M kernels that was ~20 MB of
    the analysis' memory peak. Past ``max_groups`` distinct pairs the masks' cost (one pass over all rows
    per group) outgrows the sort's, and :func:`int_groups` takes over."""
    if len(a) == 0:
        return
    firsts = pd.unique(a)
    per_first = []
    for x in firsts:
        in_x = a == x
        per_first.append((x, pd.unique(b[in_x])))
        del in_x
    if sum(len(seconds) for _, seconds in per_first) > max_groups:
        yield from int_groups(a, b)
        return
    for x, seconds in per_first:
        in_x = a == x
        if len(seconds) == 1:
            yield np.flatnonzero(in_x)
            continue
        for y in seconds:
            yield np.flatnonzero(in_x & (b == y))


def row_runs(
    a: np.ndarray, b: np.ndarray, max_runs: int = 64, chunk: int = 1 << 18
) -> list[tuple[int, int]] | None:
    """[lo, hi) per distinct (a, b) pair when each pair's rows are one contiguous run (the loader's
    rank-sorted frames: one run per rank), found from the rows where a or b changes, a chunk at a time (no
    full-length temporary); None when a pair's rows are split or there are more than ``max_runs`` runs
    (then :func:`pair_groups`). The runs are the groups :func:`pair_groups` gives, as slices."""
    n = len(a)
    if n == 0:
        return []
    cuts = [0]
    for lo in range(0, n - 1, chunk):
        x, y = a[lo : lo + chunk + 1], b[lo : lo + chunk + 1]
        cuts.extend((np.flatnonzero((x[1:] != x[:-1]) | (y[1:] != y[:-1])) + lo + 1).tolist())
        if len(cuts) > max_runs:
            return None
    firsts = {(a[i].item(), b[i].item()) for i in cuts}
    if len(firsts) < len(cuts):
        return None
    return list(zip(cuts, cuts[1:] + [n], strict=True))


def masked_durations(
    start: np.ndarray, end: np.ndarray, mask: np.ndarray, chunk: int = 1 << 18
) -> np.ndarray:
    """``end[mask] - start[mask]`` as int64, taken a chunk of rows at a time: the selected start times are
    never held at full length beside the result (on 1M kernels one 8 MB temporary less at the analysis'
    peak; same values)."""
    out = np.empty(int(np.count_nonzero(mask)), dtype=np.int64)
    pos = 0
    for lo in range(0, len(mask), chunk):
        m = mask[lo : lo + chunk]
        d = end[lo : lo + chunk][m]
        d -= start[lo : lo + chunk][m]
        out[pos : pos + len(d)] = d
        pos += len(d)
    return out


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
            self.is_compute, self.is_nccl, self.is_copy = (
                kind == COMPUTE,
                kind == NCCL,
                np.isin(kind, COPY_KINDS),
            )
        # Grouping keys keep the loader's narrow dtype (views, no copies); consumers widen what they output.
        self.pid = int_codes(k["pid"], -1)
        self.rank = int_codes(k["rank"], -1)
        self.device = int_codes(k["device"], -1)
        # Kernel names as integer codes (any numbering, possibly int8: widen before arithmetic) and their
        # distinct values: grouping by name then works on integers, whatever the column's dtype.
        # A categorical (the loader's) lends its own small codes (views; -1 = missing), else factorize.
        if isinstance(k["name"].dtype, pd.CategoricalDtype):
            # ``.array.codes``: the categorical's own codes, read-only (``.cat.codes`` copies them: 1 B per row)
            self.name_code, self.names = k["name"].array.codes, k["name"].cat.categories
        else:
            self.name_code, self.names = pd.factorize(k["name"], use_na_sentinel=True)

    def memo(self, key: str, compute):
        """``compute()``, computed once per KernelArrays and kept under ``key``: derived arrays that several
        analyses read (e.g. ``comm_kinds``' per-kernel kinds and NCCL rows)."""
        store = self.__dict__.setdefault("_memo", {})
        if key not in store:
            store[key] = compute()
        return store[key]

    def drop_memos(self) -> None:
        """Forget every :meth:`memo` (their analyses are done; a later ``memo`` computes its value again)."""
        self.__dict__.pop("_memo", None)

    def subset(self, rows: np.ndarray) -> KernelArrays:
        """The arrays of the given rows only (same names and codes), without the frame: for sums over a
        part of the kernels (one file of several joined) with no copy of the frame's other columns."""
        sub = object.__new__(KernelArrays)
        sub.frame = None  # type: ignore[assignment]
        for name in (
            "start",
            "end",
            "launch",
            "is_compute",
            "is_nccl",
            "is_copy",
            "pid",
            "rank",
            "device",
            "name_code",
        ):
            value = getattr(self, name)
            setattr(sub, name, value[rows] if value is not None else None)
        sub.names = self.names
        return sub

    def name_values(self) -> np.ndarray:
        """Distinct names as an object array indexed by ``name_code``; code -1 (no name) gives None."""
        return np.append(np.asarray(self.names, dtype=object), None)

    def rank_sets(self, rank) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """:meth:`sets` of one rank's kernels, computed once and cached (``launches`` uses them; the step table
        sums its own a piece at a time and records the totals: :meth:`note_rank_totals`)."""
        cache = self.__dict__.setdefault("_rank_sets", {})
        if rank not in cache:
            # One rank at a time: all ranks' sets together take ~40 B per kernel (on 10M kernels they set
            # the analysis' memory peak). Callers go rank by rank; what the rank overlap needs of each set
            # (its total length) is kept in :meth:`rank_totals`.
            had = bool(cache)
            cache.clear()
            rows = self.rank_rows(rank)
            if had and len(rows) >= TRIM_ROWS:
                # The previous rank's sets and temporaries (each under glibc's mmap threshold at ~1M
                # kernels: heap memory) go back to the OS before this rank's are built; without it the
                # freed heap stayed resident under live blocks, ~10 MB on the 1M-kernel analysis' peak.
                return_freed_memory()
            # The loader's rank-sorted rows are one contiguous range: taken as a slice, the rank's start and
            # end columns are views, not copies (two full copies less at the step table's memory peak).
            sets = cache[rank] = self.sets(
                slice(int(rows[0]), int(rows[-1]) + 1)
                if len(rows) and rows[-1] - rows[0] + 1 == len(rows)
                else rows
            )
            # Lengths of normalised sets: Σ (end − start) is exactly intervals.total_length of them.
            self.__dict__.setdefault("_rank_totals", {})[rank] = {
                k: int((sets[k][1] - sets[k][0]).sum()) for k in (COMPUTE, NCCL, "overlap")
            }
        return cache[rank]

    def rank_rows(self, rank) -> np.ndarray:
        """Positions of the rank's rows, ascending (``np.flatnonzero(rank == r)``). The loader's frames are
        sorted by rank: then two binary searches, not a pass over every row per rank (a run of 1,024
        per-rank files asks 1,024 times)."""
        if self.rank_sorted():
            lo, hi = equal_range(self.rank, rank)
            return np.arange(lo, hi, dtype=np.intp)
        return np.flatnonzero(self.rank == rank)

    def distinct_ranks(self) -> np.ndarray:
        """The ranks present, ascending (``np.unique(rank)``): read off the first row of each run when each
        rank's rows are one run (the loader's rank-sorted frames: no sort or hash of every row)."""

        def compute():
            runs = row_runs(self.rank, self.rank, max_runs=1 << 16)
            if runs is None:
                return np.unique(self.rank)
            return np.unique(self.rank[np.array([lo for lo, _ in runs], dtype=np.intp)])

        return self.memo("distinct_ranks", compute)

    def rank_sorted(self) -> bool:
        """Whether the rows are sorted by rank (the loader's order): checked once, remembered."""
        return self.memo(
            "rank_sorted", lambda: bool(len(self.rank) < 2 or (self.rank[1:] >= self.rank[:-1]).all())
        )

    def rank_index(self, rank) -> slice | np.ndarray:
        """The rank's rows as a slice when they are one contiguous run (the loader's rank-sorted rows: two
        binary searches, no index array, and the rank's start and end columns are views, not copies), else
        their positions (:meth:`rank_rows`)."""
        if self.rank_sorted():
            lo, hi = equal_range(self.rank, rank)
            return slice(lo, hi)
        rows = self.rank_rows(rank)
        return (
            slice(int(rows[0]), int(rows[-1]) + 1)
            if len(rows) and rows[-1] - rows[0] + 1 == len(rows)
            else rows
        )

    def note_rank_totals(self, rank, totals: dict[str, int]) -> None:
        """Keep a rank's compute, NCCL and overlap totals for :meth:`rank_totals` (as :meth:`rank_sets` does):
        a caller that went over the rank's sets without caching them (``steps``) records what it summed."""
        self.__dict__.setdefault("_rank_totals", {})[rank] = dict(totals)

    def time_ordered(self, chunk: int = 1 << 18) -> bool:
        """Rows sorted by (rank, start), the loader's order: checked a chunk at a time, remembered."""
        if "_time_ordered" not in self.__dict__:
            rank, start, n, ok = self.rank, self.start, len(self.start), True
            for lo in range(0, max(n - 1, 0), chunk):
                r, st = rank[lo : lo + chunk + 1], start[lo : lo + chunk + 1]
                if not ((r[1:] > r[:-1]) | ((r[1:] == r[:-1]) & (st[1:] >= st[:-1]))).all():
                    ok = False
                    break
            self.__dict__["_time_ordered"] = ok
        return self.__dict__["_time_ordered"]

    def rank_totals(self, rank) -> dict[str, int]:
        """Total length of one rank's compute, NCCL and overlap sets (see :meth:`rank_sets`)."""
        totals = self.__dict__.get("_rank_totals", {})
        if rank not in totals:
            self.rank_sets(rank)
            totals = self.__dict__["_rank_totals"]
        return totals[rank]

    def drop_rank_sets(self) -> None:
        """Forget the cached :meth:`rank_sets` (about as large as the rank's kernels' start/end arrays)."""
        self.__dict__.pop("_rank_sets", None)

    def sets(self, idx: np.ndarray | slice) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Normalised interval sets (merged across streams) of the rows ``idx`` (positions or a slice), by
        kernel class."""
        s, e = self.start[idx], self.end[idx]
        # From a slice (the loader's rank-sorted rows), s and e are views and, sorted by start, each class's
        # set is merged a chunk of rows at a time (intervals.normalize_rows): no copy of a class's rows and
        # no temporary longer than a chunk (a rank of 585k kernels took ~35 MB of temporaries).
        out = {"all": iv.normalize_rows(s, e)}
        for name, mask in ((COMPUTE, self.is_compute), (NCCL, self.is_nccl), ("copy", self.is_copy)):
            out[name] = iv.normalize_rows(s, e, mask[idx])
        out["overlap"] = iv.intersect_normalized(out[COMPUTE], out[NCCL])
        return {k: out[k] for k in (COMPUTE, NCCL, "copy", "all", "overlap")}


def pct(num, den):
    """100·num/den as float, NaN where den is 0 (vectorised)."""
    num = np.asarray(num, dtype=float)
    den = np.asarray(den, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, 100.0 * num / np.where(den > 0, den, 1), np.nan)


def rank_used_several_devices(kernels: pd.DataFrame, karr: KernelArrays) -> bool:
    """Whether some rank's kernels ran on more than one device. With the loader's plain integer columns
    (no missing values) the distinct (rank, device) pairs are hashed from the arrays directly, ~10x
    cheaper than a groupby-nunique over millions of rows; other frames take the pandas route."""
    plain = all(
        isinstance(kernels[c].dtype, np.dtype) and kernels[c].dtype.kind == "i" for c in ("rank", "device")
    )
    if plain:
        if len(karr.rank) == 0:
            return False
        runs = row_runs(karr.rank, karr.device, max_runs=1 << 16)
        if runs is not None:  # rank-sorted frames: one run of rows per (rank, device) pair, no hashing
            ranks_of_pairs = [karr.rank[lo].item() for lo, _ in runs]
            return len(set(ranks_of_pairs)) < len(ranks_of_pairs)
        # One int64 key built in place (rank << 32 | device's low 32 bits): one temporary, not four.
        key = karr.rank.astype(np.int64)
        key <<= 32
        key |= karr.device.astype(np.int32, copy=False).view(np.uint32)
        pairs = pd.unique(key)
        del key
        ranks = pairs >> 32
        return len(np.unique(ranks)) < len(ranks)
    return bool(
        len({*kernels["rank"].dropna().unique()}) and kernels.groupby("rank")["device"].nunique().gt(1).any()
    )


def in_steps(karr: KernelArrays, steps: pd.DataFrame) -> np.ndarray:
    """Boolean mask of the kernels that start inside a step window of their own rank (``steps``: rank,
    start_ns, end_ns; windows of one rank do not overlap)."""
    keep = np.zeros(len(karr.start), dtype=bool)
    for rank, g in steps.groupby("rank", sort=False):
        idx = karr.rank_index(rank)  # a slice on the loader's rank-sorted rows: no pass over every row
        order = np.argsort(g["start_ns"].to_numpy(np.int64), kind="stable")
        ws, we = g["start_ns"].to_numpy(np.int64)[order], g["end_ns"].to_numpy(np.int64)[order]
        s = karr.start[idx]
        at = np.searchsorted(ws, s, side="right") - 1
        keep[idx] = (at >= 0) & (s < we[np.maximum(at, 0)])
    return keep
