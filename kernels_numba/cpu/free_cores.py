"""How many of numba's threads to run: as many as the cores other processes leave free, re-checked as we go.

Every parallel region ends in a barrier that waits for all of the pool's threads. When another process keeps a
core busy, one of our threads waits for a scheduler time slice (milliseconds) at each of the ~180 regions a
token runs, and decoding collapses (measured: tg64 49 -> 1.7 tok/s beside two busy processes on 2 cores). One
thread fewer has no barrier to miss: it loses a core's share and keeps running.

The signal is the busy time of the cores we may run on (/proc/stat, steal included) minus our own process's CPU
time, over the last interval: the cores other processes used. After a pause (a server waiting for requests) a
long average would be stale, so the first step after it goes by the tasks runnable right now (procs_running).
Only Linux has either; elsewhere the count is left alone.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import numba

CHECK_INTERVAL_S = 0.25  # /proc/stat is read at most this often (~0.1 ms a read, 0.04% of the time)
STALE_AFTER_S = 2.0  # an average over a longer window (an idle pause) is not a guide to now
BUSY_WINDOW_SHARE = 0.5  # ... unless we kept this share of a core busy through it: one long step (a 512-token
# prefill, 3-6 s), after which procs_running counted our own OpenMP workers still spinning and halved the threads
# of every long prompt (1B shape pp512 through pocket bench, 2 cores, load ~1: 62.9 tok/s vs 94.8 held at 2)
FREE_CORE_SLACK = 0.3  # others using under this many cores (daemons, tick rounding) leave a core free
_STAT_IDLE_COLUMNS = (3, 4)  # idle, iowait: of user nice system idle iowait irq softirq steal (guest is in user)
_STAT_NICE_COLUMN = 1  # processes with a positive nice value: they yield a core to us (a nice-19 task takes ~1.5%
# of a core it shares with one at nice 0), so they leave it free unless we run niced ourselves, or the kernel
# schedules by autogroup (one per session, sched_autogroup_enabled): nice then only weighs inside a session, and
# a nice-19 test of another session took ~half of a shared core from a nice-0 spinner (2-core EPYC: 0.41-0.50 of
# it vs 0.49-0.73 alone and 0.49-0.69 beside the same spinner in our own session)
_AUTOGROUP_SWITCH = "/proc/sys/kernel/sched_autogroup_enabled"
_STAT_COUNTED_COLUMNS = 8


def threads_for_free_cores(max_threads: int, others_busy_cores: float) -> int:
    """The thread count for max_threads usable cores of which others keep others_busy_cores busy (>= 1)."""
    return max(1, min(max_threads, int(max_threads - others_busy_cores + FREE_CORE_SLACK)))


def busy_seconds(stat_text: str, cpus: set[int], ticks_per_second: float, niced_is_free: bool = False) -> float:
    """Busy time (all but idle and iowait; and nice, where niced_is_free) of the cores `cpus`, summed since boot,
    from /proc/stat's text."""
    free_columns = _STAT_IDLE_COLUMNS + ((_STAT_NICE_COLUMN,) if niced_is_free else ())
    ticks = 0
    for line in stat_text.splitlines():
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        columns = [int(value) for value in rest.split()[:_STAT_COUNTED_COLUMNS]]
        ticks += sum(value for column, value in enumerate(columns) if column not in free_columns)
    return ticks / ticks_per_second


def procs_running(stat_text: str) -> int:
    """Tasks runnable right now, system-wide, the reader included (/proc/stat's procs_running; 1 if absent)."""
    for line in stat_text.splitlines():
        if line.startswith("procs_running "):
            return int(line.split()[1])
    return 1


@dataclass
class CpuSample:
    """One reading: the clock, our cores' busy seconds, our process's CPU seconds, tasks runnable now."""
    wall_s: float
    cores_busy_s: float
    own_cpu_s: float
    runnable: int = 1

    def others_runnable(self) -> int:
        """Other tasks runnable at this reading: all but the thread that read it (between steps our numba
        workers are parked)."""
        return max(0, self.runnable - 1)

    def others_busy_cores(self, later: "CpuSample") -> float:
        """Cores other processes kept busy on average between this sample and a later one."""
        elapsed = later.wall_s - self.wall_s
        if elapsed <= 0:
            return 0.0
        others = (later.cores_busy_s - self.cores_busy_s) - (later.own_cpu_s - self.own_cpu_s)
        return max(0.0, others / elapsed)


def read_cpu_sample(cpus: set[int]) -> CpuSample | None:
    """Now's CpuSample, None where /proc/stat cannot be read (not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            stat_text = handle.read()
    except OSError:
        return None
    own = os.times()
    niced_is_free = not runs_niced() and not autogroups_enabled()
    cores_busy_s = busy_seconds(stat_text, cpus, os.sysconf("SC_CLK_TCK"), niced_is_free=niced_is_free)
    return CpuSample(time.monotonic(), cores_busy_s, own.user + own.system, procs_running(stat_text))


def runs_niced() -> bool:
    """This process runs at a positive nice value (its own time then shows in /proc/stat's nice column)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, 0) > 0
    except (AttributeError, OSError):
        return False


def autogroups_enabled(switch_path: str = _AUTOGROUP_SWITCH) -> bool:
    """The scheduler shares the CPU between sessions first (autogroups), so another session's niced processes take
    as much as nice-0 ones."""
    try:
        with open(switch_path, encoding="ascii") as handle:
            return handle.read().strip() == "1"
    except OSError:
        return False


def usable_cpus() -> set[int]:
    """The cores this process may run on (its affinity mask; all of them where that is unknown)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


class FreeCoreThreads:
    """Keeps the numba thread count of each thread that calls `adjust` at the free cores (at most max_threads).
    Each thread keeps its own last sample: numba's thread count is per thread."""

    def __init__(self, max_threads: int, cpus: set[int] | None = None, read_sample=read_cpu_sample,
                 interval_s: float = CHECK_INTERVAL_S, clock=time.monotonic):
        self.cpus = usable_cpus() if cpus is None else cpus
        self.max_threads = max(1, min(max_threads, len(self.cpus)))
        self._read_sample, self._interval_s, self._clock = read_sample, interval_s, clock
        self._local = threading.local()
        self._started = read_sample(self.cpus)  # the first adjust measures from here (e.g. the model load)

    def adjust(self) -> int:
        """Re-checks the free cores when the interval has passed, and sets this thread's count; returns it."""
        last: CpuSample | None = getattr(self._local, "sample", None)
        if last is not None and self._clock() - last.wall_s < self._interval_s:
            return numba.get_num_threads()
        sample = self._read_sample(self.cpus)
        if sample is None:
            return numba.get_num_threads()
        self._local.sample = sample
        threads = threads_for_free_cores(self.max_threads, self._others_busy_cores(last or self._started, sample))
        if threads != numba.get_num_threads():
            numba.set_num_threads(threads)
        return threads

    def _others_busy_cores(self, last: CpuSample | None, sample: CpuSample) -> float:
        """Others' average use since `last` when that window is a fair guide to now (short, or a long step of ours:
        we kept half a core busy through it), else their runnable tasks (after an idle pause)."""
        if last is not None and sample.wall_s - last.wall_s >= self._interval_s / 2:
            elapsed = sample.wall_s - last.wall_s
            if elapsed <= STALE_AFTER_S or sample.own_cpu_s - last.own_cpu_s >= BUSY_WINDOW_SHARE * elapsed:
                return last.others_busy_cores(sample)
        return float(sample.others_runnable())
