"""llama.cpp threads that follow the cores other processes leave free.

llama.cpp splits every matrix product of a token (or a batch of prompt tokens) across its threads
and waits at a barrier after each operation; this build of llama-cpp-python uses OpenMP, whose
waiting threads spin before they sleep.  When another process takes one of two cores, the thread
that shares that core is descheduled for whole time slices and the other waits on it at every
barrier: measured here, prefill fell from 70–96 to 30 tokens/s and generation from 20–23 to
2.5–3.8 tokens/s beside the test suite (``benchmarks/run.py --only threads`` measures it).  One
thread on the free core loses only the second core's share.

So with ``SITUATE_N_THREADS=0`` (the default) the number of threads is chosen before each call
from what the other processes used since the previous choice: the cores this process may run on,
less the cores the others kept busy (``/proc/stat`` less this process's own ``/proc/self/stat``),
rounded to the nearest whole core and at least one.  Where ``/proc`` cannot be read (not Linux)
the count stays at every allowed core.
"""

from __future__ import annotations

import os
import threading
import time

#: Seconds between two choices: a shorter window measures one time slice of the others, not
#: their load (the kernel's ticks are 4–10 ms; a blurb call takes 0.3–30 s).
MIN_WINDOW_S = 0.5


def allowed_cores() -> list[int]:
    """The CPU numbers this process may run on (``sched_getaffinity``), else ``range(cpu_count)``."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))


def _read_ticks(cores: list[int]) -> tuple[int, int, int] | None:
    """(busy ticks of ``cores``, all ticks of ``cores``, this process's user+system ticks), in
    clock ticks (``USER_HZ``); ``None`` where ``/proc`` cannot be read."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
        with open("/proc/self/stat") as f:
            own_fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    want = {f"cpu{c}" for c in cores}
    busy = total = 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if name in want:
            v = [int(x) for x in rest.split()]
            idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
            all_ = sum(v[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
            busy += all_ - idle
            total += all_
    own = int(own_fields[11]) + int(own_fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return busy, total, own


class CoreMeter:
    """Cores the other processes leave free, measured between successive calls.

    Examples
    --------
    >>> m = CoreMeter()
    >>> m.threads() >= 1
    True
    """

    def __init__(self, cores: list[int] | None = None):
        self.cores = cores or allowed_cores()
        self._lock = threading.Lock()
        self._last = _read_ticks(self.cores)
        self._last_t = time.monotonic()
        self._threads = len(self.cores)
        self._measured = False
        self.others = 0.0

    def threads(self) -> int:
        """Threads for the next call: allowed cores less the cores other processes kept busy
        since the last measurement (at least :data:`MIN_WINDOW_S` ago; else the last choice),
        rounded to the nearest core, between 1 and the allowed cores."""
        with self._lock:
            now = time.monotonic()
            if self._last is None:
                return self._threads
            if now - self._last_t < MIN_WINDOW_S:
                if self._measured:
                    return self._threads
                time.sleep(MIN_WINDOW_S - (now - self._last_t))  # once a process: a first measurement
                now = time.monotonic()
            self._measured = True
            cur = _read_ticks(self.cores)
            if cur is None:
                return self._threads
            busy, total, own = (c - p for c, p in zip(cur, self._last))
            self._last, self._last_t = cur, now
            if total <= 0:
                return self._threads
            self.others = max(0.0, (busy - own) / total * len(self.cores))
            self._threads = max(1, min(len(self.cores), round(len(self.cores) - self.others)))
            return self._threads


_METER: CoreMeter | None = None


def meter() -> CoreMeter:
    """The process-wide :class:`CoreMeter`."""
    global _METER
    if _METER is None:
        _METER = CoreMeter()
    return _METER


def fit_threads(llm, fixed: int = 0) -> int:
    """Set a loaded ``llama_cpp.Llama``'s decode and batch threads (``llama_set_n_threads``) to
    ``fixed``, or with ``fixed == 0`` to :meth:`CoreMeter.threads`; returns the count set."""
    import llama_cpp

    n = fixed or meter().threads()
    if getattr(llm, "_situate_threads", None) != n:
        llama_cpp.llama_set_n_threads(llm.ctx, n, n)
        llm._situate_threads = n
    return n
