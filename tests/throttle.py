"""A rate-limited reader: the live machine whose data reads are held to a bandwidth and a latency per
file (a test double for a slow disk or a network filesystem, where a cgroup's io.max is not at hand).
Used by tests/test_dataread.py and benchmarks/pipeline_bench.py."""

from __future__ import annotations

import threading
import time

from debtorch.host import READ_BLOCK, ColdRead, LiveHost


class ThrottledHost(LiveHost):
    """This machine, its :meth:`read_cold` held to ``mb_per_s`` (all readers together, a token bucket) and
    ``latency_s`` a file (each reader's own: parallel readers overlap it, as on a network filesystem)."""

    def __init__(self, mb_per_s: float, latency_s: float = 0.0) -> None:
        super().__init__()
        self.label = f"live, reads throttled to {mb_per_s:g} MB/s"
        self.bps, self.latency = mb_per_s * 1e6, latency_s
        self._lock = threading.Lock()
        self._free = 0.0

    def read_cold(self, p: str, limit: int, block: int = READ_BLOCK) -> ColdRead:
        start = time.perf_counter()
        got = super().read_cold(p, limit, block)
        with self._lock:
            begin = max(start, self._free)
            self._free = begin + got.bytes / self.bps
            until = self._free
        time.sleep(max(0.0, until - time.perf_counter()) + self.latency)
        return ColdRead(got.bytes, time.perf_counter() - start, got.dropped)
