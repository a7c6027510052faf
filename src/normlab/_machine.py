"""How busy the machine is, for timings that must not measure the scheduler.

A timing taken while more runnable tasks than cores compete measures the scheduler as well
as the arithmetic. :func:`tasks_waiting_for_a_core` is the kernel's count of runnable tasks
beyond the cores *now* (what a timing needs: sampled around it); :func:`load_average` is the
1-minute load average, which remembers the last minute (what a benchmark prints before and
after its run, and the fallback where ``/proc/loadavg`` cannot be read).
"""

from __future__ import annotations

import os

__all__ = ["QUIET_THRESHOLD", "QUIET_WHY", "load_average", "tasks_waiting_for_a_core"]

#: The most waiting tasks a quiet machine shows: the count is a whole number, so 0.5
#: separates "none waited" from "one did" (the load average's fallback is fractional).
QUIET_THRESHOLD = 0.5
QUIET_WHY = (
    "normlab's choice: no task waited for a core (a whole number: 0.5 separates none from one)"
)


def load_average() -> float:
    """The 1-minute load average (0 where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def tasks_waiting_for_a_core() -> float:
    """How many runnable tasks (running or ready, the caller included) exceed the cores
    now: the kernel's count in ``/proc/loadavg`` (its fourth field, "running/total") minus
    ``os.cpu_count()``, or the 1-minute load average's excess where that file cannot be
    read; 0 when every runnable task has a core."""
    cores = os.cpu_count() or 1
    try:
        with open("/proc/loadavg") as f:
            running = float(f.read().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        running = load_average()
    return max(0.0, running - cores)
