"""cd_operation_times: every operation timed, positive and finite; best_time of a sleep."""

from __future__ import annotations

import math
import time

from normlab.flows.timing import OPERATIONS, best_time, cd_operation_times


def test_every_operation_is_timed():
    times = cd_operation_times(32, seed=0)
    assert tuple(times) == OPERATIONS
    assert all(0.0 < t < 1.0 and math.isfinite(t) for t in times.values())


def test_best_time_reads_seconds_per_call():
    assert 1e-3 <= best_time(lambda: time.sleep(1e-3), min_total=2e-3, repeats=2) < 0.1
