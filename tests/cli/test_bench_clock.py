"""normlab bench times one-thread CPU runs in the thread's CPU time (robust to load)."""

from __future__ import annotations

import time

import torch

from normlab.cli._bench_ops import clock, median_times


def test_one_thread_cpu_runs_use_the_thread_clock() -> None:
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert clock("cpu") is time.thread_time
        assert clock("cuda") is time.perf_counter
        # a sleeping function uses no CPU: the thread clock does not count the wait
        busy = lambda: sum(range(20000))  # noqa: E731
        samples = median_times({"sleep": lambda: time.sleep(0.002), "busy": busy}, "cpu", 2, 0.01)
        assert max(samples["sleep"]) < 0.001
        assert min(samples["busy"]) > 0
        torch.set_num_threads(2)
        assert clock("cpu") is time.perf_counter
    finally:
        torch.set_num_threads(threads)


def test_a_rare_slow_call_does_not_move_a_cpu_sample() -> None:
    """A round's sample is the median of its calls: one call in ten stalled 30 ms (a page
    fault, a descheduled thread) leaves it at the 1-ms calls, where a mean would read ~4 ms."""
    calls = iter(range(10**6))

    def spiky() -> None:
        time.sleep(0.03 if next(calls) % 10 == 5 else 0.001)

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # the wall clock (sleeping counts)
        samples = median_times({"spiky": spiky}, "cpu", 3, 0.012)
    finally:
        torch.set_num_threads(threads)
    assert all(0.0009 < t < 0.0025 for t in samples["spiky"]), samples
