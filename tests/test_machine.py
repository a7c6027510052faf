"""The machine-load readings that timings are gated on."""

from __future__ import annotations

import builtins
import io
import os

from normlab import _machine as machine


def test_tasks_waiting_is_a_count_of_tasks_beyond_the_cores(monkeypatch):
    assert machine.tasks_waiting_for_a_core() >= 0
    real_open = builtins.open

    def proc(running: int):
        def fake(path, *args, **kwargs):
            if str(path) == "/proc/loadavg":
                return io.StringIO(f"0.50 0.40 0.30 {running}/300 12345\n")
            return real_open(path, *args, **kwargs)

        return fake

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(builtins, "open", proc(2))
    assert machine.tasks_waiting_for_a_core() == 0
    monkeypatch.setattr(builtins, "open", proc(5))
    assert machine.tasks_waiting_for_a_core() == 3


def test_tasks_waiting_falls_back_to_the_load_average(monkeypatch):
    real_open = builtins.open

    def no_proc(path, *args, **kwargs):
        if str(path) == "/proc/loadavg":
            raise OSError("no /proc here")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", no_proc)
    monkeypatch.setattr(os, "getloadavg", lambda: (6.5, 1.0, 1.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert machine.tasks_waiting_for_a_core() == 2.5
