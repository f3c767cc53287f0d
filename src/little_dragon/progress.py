"""Progress for long work: a tqdm bar on a terminal, plain log lines elsewhere (CI, DVC logs)."""
from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any


class Progress:
    def __init__(self, total: int, desc: str, logger: logging.Logger | None = None, every: int = 1):
        self.total, self.desc, self.done = total, desc, 0
        self.log = logger or logging.getLogger("little_dragon.progress")
        self.every = max(1, every)
        self.t0 = time.perf_counter()
        self.bar = None
        self._lock = threading.Lock()  # updated from fan-out threads
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, dynamic_ncols=True)

    def update(self, n: int = 1, **postfix: Any) -> None:
        with self._lock:
            self._update(n, **postfix)

    def _update(self, n: int, **postfix: Any) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix(postfix, refresh=False)
        elif self.done % self.every == 0 or self.done == self.total:
            rate = self.done / max(time.perf_counter() - self.t0, 1e-9)
            extra = " ".join(f"{k}={v}" for k, v in postfix.items())
            self.log.info("%s: %d/%d (%.2f/s) %s", self.desc, self.done, self.total, rate, extra)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
