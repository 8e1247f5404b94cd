"""The thread policy's logic: free cores from /proc/stat readings, and the thread count that follows them (no
timings: samples and the clock are made up)."""
import os
import threading

import numba
import pytest

from kernels_numba.cpu import free_cores
from kernels_numba.cpu.free_cores import (CpuSample, FreeCoreThreads, busy_seconds, procs_running,
                                          threads_for_free_cores, usable_cpus)

STAT = """cpu  500 0 200 900 40 0 10 30 0 0
cpu0 100 0 50 400 20 0 5 10 0 0
cpu1 400 0 150 500 20 0 5 20 7 0
intr 12345
ctxt 999
procs_running 3
procs_blocked 0
"""


def test_busy_seconds_counts_all_but_idle_and_iowait_of_our_cores():
    assert busy_seconds(STAT, {0}, 100) == pytest.approx((100 + 50 + 5 + 10) / 100)  # steal counts as busy
    assert busy_seconds(STAT, {0, 1}, 100) == pytest.approx((165 + 575) / 100)  # guest is already in user
    assert busy_seconds(STAT, {5}, 100) == 0.0
    assert procs_running(STAT) == 3 and procs_running("cpu0 1 2 3") == 1


def test_niced_processes_leave_their_cores_free_to_us():
    """Time in the nice column (tasks at a positive nice value) yields to a process at nice 0: such a neighbour
    (a build or test run at nice 19) must not halve our threads; it is busy time when we run niced ourselves."""
    niced = "cpu0 100 300 50 400 20 0 5 10 0 0\n"
    assert busy_seconds(niced, {0}, 100) == pytest.approx((100 + 300 + 50 + 5 + 10) / 100)
    assert busy_seconds(niced, {0}, 100, niced_is_free=True) == pytest.approx((100 + 50 + 5 + 10) / 100)
    assert free_cores.runs_niced() is (os.getpriority(os.PRIO_PROCESS, 0) > 0)


def test_autogroups_make_other_sessions_niced_processes_busy(tmp_path):
    """With autogroups, nice weighs only inside a session: another session's nice-19 test takes half a core."""
    switch = tmp_path / "sched_autogroup_enabled"
    switch.write_text("1\n")
    assert free_cores.autogroups_enabled(str(switch))
    switch.write_text("0\n")
    assert not free_cores.autogroups_enabled(str(switch))
    assert not free_cores.autogroups_enabled(str(tmp_path / "absent"))


@pytest.mark.parametrize("others, expected", [(0.0, 2), (0.2, 2), (0.5, 1), (1.0, 1), (2.0, 1), (3.5, 1)])
def test_thread_count_for_free_cores_of_two(others, expected):
    assert threads_for_free_cores(2, others) == expected


def test_thread_count_for_free_cores_of_eight():
    assert [threads_for_free_cores(8, others) for others in (0.0, 0.9, 1.0, 3.2, 7.9, 20.0)] == [8, 7, 7, 5, 1, 1]


def test_others_busy_cores_subtracts_our_own_cpu_time():
    first = CpuSample(wall_s=10.0, cores_busy_s=100.0, own_cpu_s=50.0)
    later = CpuSample(wall_s=10.5, cores_busy_s=101.0, own_cpu_s=50.4)  # 2 cores busy, 0.8 of them ours
    assert first.others_busy_cores(later) == pytest.approx(1.2)
    assert first.others_busy_cores(first) == 0.0
    assert first.others_busy_cores(CpuSample(10.5, 100.1, 50.4)) == 0.0  # tick rounding: never negative


class FakeMachine:
    """Made-up /proc/stat readings: others keep `others_busy` cores busy, we keep `own_busy`, as the clock runs."""

    def __init__(self):
        self.now, self.cores_busy_s, self.own_cpu_s = 0.0, 0.0, 0.0
        self.others_busy, self.own_busy = 0.0, 1.0
        self.runnable = 1  # tasks runnable at a read, the reader included
        self.reads = 0

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.cores_busy_s += (self.others_busy + self.own_busy) * seconds
        self.own_cpu_s += self.own_busy * seconds

    def read(self, cpus):
        self.reads += 1
        return CpuSample(self.now, self.cores_busy_s, self.own_cpu_s, self.runnable)


def _in_a_fresh_thread(body):
    """Runs body in a new thread (numba's count is per thread, so the test leaves the main thread's alone)."""
    errors = []

    def run():
        try:
            body()
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if errors:
        raise errors[0]


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs a pool of 2 threads")
def test_follows_the_free_cores_and_reads_at_most_once_an_interval():
    def body():
        machine = FakeMachine()
        policy = FreeCoreThreads(2, cpus={0, 1}, read_sample=machine.read, interval_s=0.25, clock=lambda: machine.now)
        numba.set_num_threads(2)
        machine.advance(1.0)  # e.g. the model load, with the machine idle
        assert policy.adjust() == 2
        machine.others_busy = 2.0  # two busy loops start
        machine.advance(0.1)
        reads = machine.reads
        assert policy.adjust() == 2 and machine.reads == reads  # within the interval: no read, no change
        machine.advance(0.2)
        assert policy.adjust() == 1
        assert numba.get_num_threads() == 1
        machine.others_busy, machine.own_busy = 0.0, 1.0  # they stop
        machine.advance(0.3)
        assert policy.adjust() == 2

    _in_a_fresh_thread(body)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs a pool of 2 threads")
def test_a_long_step_of_ours_is_not_a_pause():
    """A 5 s prefill step on both cores: its window's average decides, not procs_running (which counts our own
    workers still spinning after the step)."""
    def body():
        machine = FakeMachine()
        policy = FreeCoreThreads(2, cpus={0, 1}, read_sample=machine.read, interval_s=0.25, clock=lambda: machine.now)
        numba.set_num_threads(2)
        machine.advance(0.3)
        assert policy.adjust() == 2
        machine.own_busy, machine.runnable = 2.0, 3
        machine.advance(5.0)
        assert policy.adjust() == 2

    _in_a_fresh_thread(body)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs a pool of 2 threads")
def test_after_a_pause_or_at_once_goes_by_the_tasks_runnable_now():
    """A server idle for a minute while a build started a second ago: the minute's average says 'free', the
    runnable tasks say 'busy'. A policy made just before its first step has no window yet: the same rule."""
    def body():
        machine = FakeMachine()
        policy = FreeCoreThreads(2, cpus={0, 1}, read_sample=machine.read, interval_s=0.25, clock=lambda: machine.now)
        numba.set_num_threads(2)
        machine.own_busy = 0.0
        machine.advance(60.0)
        machine.runnable = 3  # us and two busy loops
        assert policy.adjust() == 1
        machine.runnable, machine.own_busy = 1, 1.0
        machine.advance(0.3)
        assert policy.adjust() == 2  # a fair window again: the average decides (others used nothing)

        fresh = FreeCoreThreads(2, cpus={0, 1}, read_sample=machine.read, interval_s=0.25, clock=lambda: machine.now)
        machine.runnable = 2
        assert fresh.adjust() == 1

    _in_a_fresh_thread(body)


def test_caps_at_the_usable_cores_and_keeps_the_count_without_proc_stat():
    def body():
        numba.set_num_threads(1)
        policy = FreeCoreThreads(8, cpus={0}, read_sample=lambda cpus: None)
        assert policy.max_threads == 1
        assert policy.adjust() == 1 and numba.get_num_threads() == 1

    _in_a_fresh_thread(body)
    assert len(usable_cpus()) >= 1


def test_reads_this_machines_proc_stat():
    sample = free_cores.read_cpu_sample(usable_cpus())
    if sample is None:
        pytest.skip("no /proc/stat here")
    assert sample.cores_busy_s > 0 and sample.own_cpu_s > 0
