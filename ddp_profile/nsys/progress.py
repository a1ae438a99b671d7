"""A file-count progress bar on stderr for loading many per-rank exports (``load_trace(progress=True)``).

On a terminal it redraws one line (``\\r``); in a log (not a TTY) it writes one line per file, so CI logs
stay readable. It is a callable taking the loader's message, like any ``progress`` callback.
"""

from __future__ import annotations

import sys
import threading
import time


class ProgressBar:
    """``[#####.....] 4/8 files, 2.1 s  rank3.sqlite``; thread-safe (files finish in worker threads).

    ``min_s``: draw nothing until this many seconds have passed since the bar was made, so a quick load
    stays silent and only a slow one shows where it is."""

    def __init__(self, total: int, stream=None, width: int = 24, label: str = "loading", min_s: float = 0.0):
        self.total, self.done, self.width, self.label, self.min_s = max(total, 1), 0, width, label, min_s
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.t0 = time.perf_counter()
        self._lock = threading.Lock()

    def __call__(self, message: str) -> None:
        with self._lock:
            self.done = min(self.done + 1, self.total)
            if time.perf_counter() - self.t0 < self.min_s:
                return
            filled = self.width * self.done // self.total
            bar = "#" * filled + "." * (self.width - filled)
            line = (
                f"{self.label} [{bar}] {self.done}/{self.total} files, "
                f"{time.perf_counter() - self.t0:.1f} s  {message.rsplit('/', 1)[-1]}"
            )
            if self.tty:
                end = "\n" if self.done == self.total else ""
                self.stream.write("\r\033[K" + line + end)
            else:
                self.stream.write(line + "\n")
            self.stream.flush()
